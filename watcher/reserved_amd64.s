#include "textflag.h"

// A raw signal handler (C calling convention: DI is the signal number),
// run on the thread's alternate signal stack: write(reservedFD, &sig, 1).
// The kernel restores every register at sigreturn.
TEXT ·reservedHandler(SB),NOSPLIT|NOFRAME,$0
	SUBQ	$16, SP
	MOVQ	DI, 0(SP)
	MOVQ	·reservedFD(SB), DI
	MOVQ	SP, SI
	MOVQ	$1, DX
	MOVQ	$1, AX // SYS_write
	SYSCALL
	ADDQ	$16, SP
	RET

TEXT ·reservedHandlerAddr(SB),NOSPLIT,$0-8
	LEAQ	·reservedHandler(SB), AX
	MOVQ	AX, ret+0(FP)
	RET
