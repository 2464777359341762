//go:build linux && !purego

#include "textflag.h"

// The SHA-256 block function on the Armv8 SHA2 instructions. The state
// stays as the two halves it is stored in, ABCD (V0) and EFGH (V1), lane
// 0 first. SHA256H runs four rounds and leaves the new ABCD; SHA256H2
// runs the same four rounds for the new EFGH and needs the ABCD from
// before them (V9). The 64 constants live in V16..V31 for the whole call.

#define WK V8
#define ABCD0 V9

// Rounds 4g..4g+3 on the schedule words m = W[4g..4g+3], constants k.
#define ROUNDS4(m, k) \
	VADD     m.S4, k.S4, WK.S4; \
	VMOV     V0.B16, ABCD0.B16; \
	SHA256H  WK.S4, V1, V0; \
	SHA256H2 WK.S4, ABCD0, V1

// The same, and the schedule words of group g+4 into m (free once W+K
// is taken): SHA256SU0 adds σ0(W[i-15..i-12]) from m1 to m = W[i-16..];
// SHA256SU1 adds W[i-7..i-4] (from m2, m3) and σ1(W[i-2..i+1]), the last
// two from the words it makes itself.
#define ROUNDS4SCHED(m, m1, m2, m3, k) \
	VADD      m.S4, k.S4, WK.S4; \
	SHA256SU0 m1.S4, m.S4; \
	VMOV      V0.B16, ABCD0.B16; \
	SHA256H   WK.S4, V1, V0; \
	SHA256SU1 m3.S4, m2.S4, m.S4; \
	SHA256H2  WK.S4, ABCD0, V1

// func sha256BlockARM(h *[8]uint32, p []byte, k *[64]uint32)
// len(p) is a multiple of 64.
TEXT ·sha256BlockARM(SB), NOSPLIT, $0-40
	MOVD h+0(FP), R0
	MOVD p_base+8(FP), R1
	MOVD p_len+16(FP), R2
	MOVD k+32(FP), R3
	LSR  $6, R2, R2
	CBZ  R2, done

	VLD1.P 64(R3), [V16.S4, V17.S4, V18.S4, V19.S4]
	VLD1.P 64(R3), [V20.S4, V21.S4, V22.S4, V23.S4]
	VLD1.P 64(R3), [V24.S4, V25.S4, V26.S4, V27.S4]
	VLD1   (R3), [V28.S4, V29.S4, V30.S4, V31.S4]
	VLD1   (R0), [V0.S4, V1.S4]

block:
	VMOV   V0.B16, V2.B16
	VMOV   V1.B16, V3.B16
	VLD1.P 64(R1), [V4.S4, V5.S4, V6.S4, V7.S4]
	VREV32 V4.B16, V4.B16
	VREV32 V5.B16, V5.B16
	VREV32 V6.B16, V6.B16
	VREV32 V7.B16, V7.B16

	ROUNDS4SCHED(V4, V5, V6, V7, V16)
	ROUNDS4SCHED(V5, V6, V7, V4, V17)
	ROUNDS4SCHED(V6, V7, V4, V5, V18)
	ROUNDS4SCHED(V7, V4, V5, V6, V19)
	ROUNDS4SCHED(V4, V5, V6, V7, V20)
	ROUNDS4SCHED(V5, V6, V7, V4, V21)
	ROUNDS4SCHED(V6, V7, V4, V5, V22)
	ROUNDS4SCHED(V7, V4, V5, V6, V23)
	ROUNDS4SCHED(V4, V5, V6, V7, V24)
	ROUNDS4SCHED(V5, V6, V7, V4, V25)
	ROUNDS4SCHED(V6, V7, V4, V5, V26)
	ROUNDS4SCHED(V7, V4, V5, V6, V27)
	ROUNDS4(V4, V28)
	ROUNDS4(V5, V29)
	ROUNDS4(V6, V30)
	ROUNDS4(V7, V31)

	VADD V2.S4, V0.S4, V0.S4
	VADD V3.S4, V1.S4, V1.S4
	SUB  $1, R2
	CBNZ R2, block

	VST1 [V0.S4, V1.S4], (R0)

done:
	RET
