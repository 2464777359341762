#include "textflag.h"

// A raw signal handler (C calling convention: R0 is the signal number),
// run on the thread's alternate signal stack: write(reservedFD, &sig, 1).
// The kernel restores every register at sigreturn.
TEXT ·reservedHandler(SB),NOSPLIT|NOFRAME,$0
	SUB	$16, RSP
	MOVD	R0, 0(RSP)
	MOVD	·reservedFD(SB), R0
	MOVD	RSP, R1
	MOVD	$1, R2
	MOVD	$64, R8 // SYS_write
	SVC
	ADD	$16, RSP
	RET

TEXT ·reservedHandlerAddr(SB),NOSPLIT,$0-8
	MOVD	$·reservedHandler(SB), R0
	MOVD	R0, ret+0(FP)
	RET
