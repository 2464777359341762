#include "textflag.h"

// Raw signal handlers (C calling convention: R0 is the signal number,
// R1 the siginfo, R2 the context), run on the thread's alternate signal
// stack with every signal blocked. The kernel restores every register
// at sigreturn.

// rawHandler: write(rawFD, &sig, 1).
TEXT ·rawHandler(SB),NOSPLIT|NOFRAME,$0
	SUB	$16, RSP
	MOVD	R0, 0(RSP)
	MOVD	·rawFD(SB), R0
	MOVD	RSP, R1
	MOVD	$1, R2
	MOVD	$64, R8 // SYS_write
	SVC
	ADD	$16, RSP
	RET

// faultHandler: rawHandler when a process sent the signal (si_code, at
// offset 8 of the siginfo, at most 0), else a tail call of the
// runtime's handler with the same arguments, stack and link register.
TEXT ·faultHandler(SB),NOSPLIT|NOFRAME,$0
	MOVW	8(R1), R3
	CMPW	$0, R3
	BLE	user
	MOVD	·goHandler(SB), R3
	JMP	(R3)
user:
	JMP	·rawHandler(SB)

TEXT ·rawHandlerAddr(SB),NOSPLIT,$0-8
	MOVD	$·rawHandler(SB), R0
	MOVD	R0, ret+0(FP)
	RET

TEXT ·faultHandlerAddr(SB),NOSPLIT,$0-8
	MOVD	$·faultHandler(SB), R0
	MOVD	R0, ret+0(FP)
	RET
