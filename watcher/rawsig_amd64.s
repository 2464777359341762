#include "textflag.h"

// Raw signal handlers (C calling convention: DI is the signal number,
// SI the siginfo, DX the context), run on the thread's alternate signal
// stack with every signal blocked. The kernel restores every register
// at sigreturn.

// rawHandler: write(rawFD, &sig, 1).
TEXT ·rawHandler(SB),NOSPLIT|NOFRAME,$0
	SUBQ	$16, SP
	MOVQ	DI, 0(SP)
	MOVQ	·rawFD(SB), DI
	MOVQ	SP, SI
	MOVQ	$1, DX
	MOVQ	$1, AX // SYS_write
	SYSCALL
	ADDQ	$16, SP
	RET

// faultHandler: rawHandler when a process sent the signal (si_code, at
// offset 8 of the siginfo, at most 0), else a tail call of the
// runtime's handler with the same arguments and stack.
TEXT ·faultHandler(SB),NOSPLIT|NOFRAME,$0
	MOVL	8(SI), AX
	CMPL	AX, $0
	JLE	user
	MOVQ	·goHandler(SB), AX
	JMP	AX
user:
	JMP	·rawHandler(SB)

TEXT ·rawHandlerAddr(SB),NOSPLIT,$0-8
	LEAQ	·rawHandler(SB), AX
	MOVQ	AX, ret+0(FP)
	RET

TEXT ·faultHandlerAddr(SB),NOSPLIT,$0-8
	LEAQ	·faultHandler(SB), AX
	MOVQ	AX, ret+0(FP)
	RET
