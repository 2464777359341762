//go:build amd64 || arm64

package watcher

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Signals 32 and 34 are the runtime's (glibc's SIGCANCEL and musl's
// SIGSYNCCALL): it installs no handler for them and signal.Notify
// cannot ask for them, so their default action would end a watcher
// that is not PID 1 and the kernel would drop them silently for one
// that is. glibc names 34 SIGRTMIN, so `kill -RTMIN` sends it. The
// watcher catches them with a handler of its own in assembly
// (reserved_*.s), which writes the signal's number to a pipe; a
// goroutine reads it and hands the signal to the loop like any other.
// Signal 33 stays the runtime's: it runs its all-thread system calls
// (the privilege drop) on it, and drops one a user sends.

// reservedFD is the write end of the pipe; the handler reads it.
var reservedFD int64 = -1

// reservedHandler is the handler: write(reservedFD, &sig, 1).
func reservedHandler()

// reservedHandlerAddr is reservedHandler's entry address.
func reservedHandlerAddr() uintptr

// catchReserved installs the handler for 32 and 34 (unless one was
// ignored at start: it stays ignored) and feeds c from the pipe. It
// borrows the flags and the sigreturn trampoline of the handler the
// runtime installed for SIGSEGV, which it always does.
func catchReserved(st *sigState, c chan<- os.Signal) {
	var goAct kernelSigaction
	if err := rtSigaction(syscall.SIGSEGV, nil, &goAct); err != nil || goAct.handler <= sigIgn {
		return
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		logf("catch signals 32 and 34: " + err.Error())
		return
	}
	reservedFD = int64(fds[1])
	act := kernelSigaction{handler: reservedHandlerAddr(), flags: goAct.flags, restorer: goAct.restorer, mask: ^uint64(0)}
	for _, s := range []syscall.Signal{sigRTMin, sigRTMin + 2} {
		if !st.ignored[s] {
			if err := rtSigaction(s, &act, nil); err != nil {
				logf("catch signal " + itoa(int(s)) + ": " + err.Error())
			}
		}
	}
	go func() {
		r := os.NewFile(uintptr(fds[0]), "reserved-signals")
		var b [16]byte
		for {
			n, err := r.Read(b[:])
			for _, s := range b[:n] {
				c <- syscall.Signal(s)
			}
			if err != nil {
				return
			}
		}
	}()
}
