//go:build !purego

#include "textflag.h"

// The SHA-256 block function on the SHA extensions (SHA256RNDS2,
// SHA256MSG1, SHA256MSG2). The instructions keep the eight working
// variables as two lanes of four: ABEF = {F, E, B, A} and
// CDGH = {H, G, D, C} (lane 0 first). SHA256RNDS2 runs two rounds: it
// reads CDGH from its destination, ABEF from its source and the two
// sums W+K from the low half of X0 (implicit), and leaves the new ABEF
// in the destination. After two rounds the old ABEF is the new CDGH, so
// the pair of registers swaps roles every two rounds and is back in
// place after four.

#define ABEF X1
#define CDGH X2
#define M0 X3
#define M1 X4
#define M2 X5
#define M3 X6
#define T X7
#define SAVE0 X8
#define SAVE1 X9
#define BSWAP X10
#define K CX

// Group g (rounds 4g..4g+3, words in M[g mod 4]) runs SCHED2 for group
// g+1 between its two halves and SCHED1 for group g+2 after them.

// Two rounds i, i+1 from the schedule words m = W[i..i+3]; off is 4*i,
// the offset of K[i] in the constant table. X0 keeps W+K for i+2, i+3.
#define ROUNDS2A(m, off) \
	MOVOU       off(K), X0; \
	PADDD       m, X0; \
	SHA256RNDS2 X0, ABEF, CDGH

// Rounds i+2, i+3: the high half of X0 moved down.
#define ROUNDS2B \
	PSHUFD      $0x0e, X0, X0; \
	SHA256RNDS2 X0, CDGH, ABEF

// The schedule, W[i] = σ1(W[i-2]) + W[i-7] + σ0(W[i-15]) + W[i-16], four
// words at a time in two steps placed between the rounds (they are off
// the rounds' dependency chain, and this order lets them run in the
// rounds' latency: ~1.4 GB/s where four rounds then four words made
// ~1.2 GB/s). SCHED1(w, w12): w = W[i-16..i-13] becomes
// w + σ0(W[i-15..i-12]) (w12 = W[i-12..i-9]).
#define SCHED1(w, w12) \
	SHA256MSG1 w12, w

// SCHED2(w, w8, w4): w (from SCHED1) plus W[i-7..i-4], picked from
// w8 = W[i-8..i-5] and w4 = W[i-4..i-1], plus σ1 of W[i-2..i+1]:
// SHA256MSG2 takes W[i-2], W[i-1] from w4 and chains the two words it
// makes itself. w is then W[i..i+3].
#define SCHED2(w, w8, w4) \
	MOVO       w4, T; \
	PALIGNR    $4, w8, T; \
	PADDD      T, w; \
	SHA256MSG2 w4, w

// Load sixteen big-endian words of the block at SI.
#define LOAD(m, off) \
	MOVOU  off(SI), m; \
	PSHUFB BSWAP, m

// func sha256BlockSHANI(h *[8]uint32, p []byte, k *[64]uint32)
// len(p) is a multiple of 64.
TEXT ·sha256BlockSHANI(SB), NOSPLIT, $0-40
	MOVQ h+0(FP), DI
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), DX
	MOVQ k+32(FP), K
	SHRQ $6, DX
	JZ   done

	MOVOU bswap32<>(SB), BSWAP

	// {A, B, C, D}, {E, F, G, H} -> ABEF, CDGH.
	MOVOU   0(DI), ABEF
	MOVOU   16(DI), CDGH
	PSHUFD  $0xb1, ABEF, ABEF // B A D C
	PSHUFD  $0x1b, CDGH, CDGH // H G F E
	MOVO    ABEF, T
	PALIGNR $8, CDGH, ABEF    // F E B A
	PBLENDW $0xf0, T, CDGH    // H G D C

block:
	MOVO ABEF, SAVE0
	MOVO CDGH, SAVE1

	LOAD(M0, 0)
	LOAD(M1, 16)
	LOAD(M2, 32)
	LOAD(M3, 48)

	ROUNDS2A(M0, 0); ROUNDS2B
	ROUNDS2A(M1, 16); ROUNDS2B
	ROUNDS2A(M2, 32); ROUNDS2B; SCHED1(M0, M1)
	ROUNDS2A(M3, 48); SCHED2(M0, M2, M3); ROUNDS2B; SCHED1(M1, M2)
	ROUNDS2A(M0, 64); SCHED2(M1, M3, M0); ROUNDS2B; SCHED1(M2, M3)
	ROUNDS2A(M1, 80); SCHED2(M2, M0, M1); ROUNDS2B; SCHED1(M3, M0)
	ROUNDS2A(M2, 96); SCHED2(M3, M1, M2); ROUNDS2B; SCHED1(M0, M1)
	ROUNDS2A(M3, 112); SCHED2(M0, M2, M3); ROUNDS2B; SCHED1(M1, M2)
	ROUNDS2A(M0, 128); SCHED2(M1, M3, M0); ROUNDS2B; SCHED1(M2, M3)
	ROUNDS2A(M1, 144); SCHED2(M2, M0, M1); ROUNDS2B; SCHED1(M3, M0)
	ROUNDS2A(M2, 160); SCHED2(M3, M1, M2); ROUNDS2B; SCHED1(M0, M1)
	ROUNDS2A(M3, 176); SCHED2(M0, M2, M3); ROUNDS2B; SCHED1(M1, M2)
	ROUNDS2A(M0, 192); SCHED2(M1, M3, M0); ROUNDS2B; SCHED1(M2, M3)
	ROUNDS2A(M1, 208); SCHED2(M2, M0, M1); ROUNDS2B; SCHED1(M3, M0)
	ROUNDS2A(M2, 224); SCHED2(M3, M1, M2); ROUNDS2B
	ROUNDS2A(M3, 240); ROUNDS2B

	PADDD SAVE0, ABEF
	PADDD SAVE1, CDGH

	ADDQ $64, SI
	DECQ DX
	JNZ  block

	// ABEF, CDGH -> {A, B, C, D}, {E, F, G, H}.
	PSHUFD  $0x1b, ABEF, ABEF // A B E F
	PSHUFD  $0xb1, CDGH, CDGH // G H C D
	MOVO    ABEF, T
	PBLENDW $0xf0, CDGH, ABEF // A B C D
	PALIGNR $8, T, CDGH       // E F G H
	MOVOU   ABEF, 0(DI)
	MOVOU   CDGH, 16(DI)

done:
	RET

// func cpuid(leaf, sub uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET

// PSHUFB mask: reverse the bytes of each 32-bit lane.
DATA bswap32<>+0(SB)/8, $0x0405060700010203
DATA bswap32<>+8(SB)/8, $0x0c0d0e0f08090a0b
GLOBL bswap32<>(SB), RODATA|NOPTR, $16
