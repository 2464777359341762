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

// Rounds i..i+3 with the schedule words m = W[i..i+3]; off is 4*i, the
// offset of K[i] in the constant table.
#define ROUNDS4(m, off) \
	MOVOU       off(K), X0; \
	PADDD       m, X0; \
	SHA256RNDS2 X0, ABEF, CDGH; \
	PSHUFD      $0x0e, X0, X0; \
	SHA256RNDS2 X0, CDGH, ABEF

// The next four schedule words W[i..i+3] into w16 (which holds
// W[i-16..i-13]) from w12 = W[i-12..], w8 = W[i-8..], w4 = W[i-4..]:
// SHA256MSG1 adds σ0(W[i-15..i-12]), the PALIGNR picks W[i-7..i-4], and
// SHA256MSG2 adds σ1(W[i-2..i+1]), chaining the two lanes it makes
// itself.
#define SCHEDULE(w16, w12, w8, w4) \
	SHA256MSG1 w12, w16; \
	MOVO       w4, T; \
	PALIGNR    $4, w8, T; \
	PADDD      T, w16; \
	SHA256MSG2 w4, w16

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

	ROUNDS4(M0, 0)
	ROUNDS4(M1, 16)
	ROUNDS4(M2, 32)
	ROUNDS4(M3, 48)

	SCHEDULE(M0, M1, M2, M3); ROUNDS4(M0, 64)
	SCHEDULE(M1, M2, M3, M0); ROUNDS4(M1, 80)
	SCHEDULE(M2, M3, M0, M1); ROUNDS4(M2, 96)
	SCHEDULE(M3, M0, M1, M2); ROUNDS4(M3, 112)

	SCHEDULE(M0, M1, M2, M3); ROUNDS4(M0, 128)
	SCHEDULE(M1, M2, M3, M0); ROUNDS4(M1, 144)
	SCHEDULE(M2, M3, M0, M1); ROUNDS4(M2, 160)
	SCHEDULE(M3, M0, M1, M2); ROUNDS4(M3, 176)

	SCHEDULE(M0, M1, M2, M3); ROUNDS4(M0, 192)
	SCHEDULE(M1, M2, M3, M0); ROUNDS4(M1, 208)
	SCHEDULE(M2, M3, M0, M1); ROUNDS4(M2, 224)
	SCHEDULE(M3, M0, M1, M2); ROUNDS4(M3, 240)

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
