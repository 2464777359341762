//go:build amd64 || arm64

package watcher

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// The watcher catches signals with a handler of its own in assembly
// (rawsig_*.s) that writes the signal's number to a pipe; a goroutine
// reads it and hands the signal to the loop. It installs that handler
// with one rt_sigaction per signal, where signal.Notify costs a
// synchronous round trip to the runtime's signal-mask thread per
// signal (runtime.sigenable: ~60 of them were two thirds of the
// watcher's start before the agent's fork), and a thread of its own.
//
// It is also the only way to catch signals 32 and 34 (glibc's
// SIGCANCEL and musl's SIGSYNCCALL; glibc names 34 SIGRTMIN, so
// `kill -RTMIN` sends it): the runtime installs no handler for them and
// signal.Notify cannot ask for them, so their default action would end
// a watcher that is not PID 1 and the kernel would drop them silently
// for one that is. Signal 33 stays the runtime's: it runs its
// all-thread system calls (the privilege drop) on it.
//
// What the handler replaces, and why nothing is lost:
//   - The runtime's handler, for signals it would have delivered only
//     through signal.Notify anyway. A signal raised by the kernel for a
//     fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS: si_code
//     above 0) goes on to the runtime's handler (faultHandler), which
//     panics; one sent by a process is the pipe's.
//   - SIGPIPE: a write to fd 1 or 2 that fails with EPIPE makes the
//     os package ask the runtime to die of SIGPIPE unless os/signal
//     asked for it or ignores it. The watcher marks it ignored for the
//     runtime (signal.Ignore) and then installs its handler over the
//     SIG_IGN: the kernel's SIGPIPE still reaches the loop, and the
//     agent, whose exec resets a caught signal, starts with SIGPIPE at
//     its default action.
//   - A signal blocked when the watcher started stays blocked on every
//     thread the runtime makes, so no handler would ever run: those are
//     left to signal.Notify, whose signal-mask thread unblocks them
//     (see catchSignals).
//   - In the agent between fork and exec, the runtime resets the
//     handlers it installed but not the watcher's over SIGCONT, SIGTSTP,
//     32 and 34 (signals it had left alone): one sent to the new pid in
//     that moment is written to the pipe and forwarded to the agent,
//     which is whom it was for. exec resets them all.

// rawFD is the write end of the pipe; the handlers read it.
var rawFD int64 = -1

// goHandler is the runtime's own handler (runtime.sigtramp), where
// faultHandler sends a fault the kernel raised.
var goHandler uintptr

// rawHandler is the handler: write(rawFD, &sig, 1).
func rawHandler()

// faultHandler is rawHandler for a signal a process sent (si_code at
// most 0: SI_USER, SI_QUEUE, SI_TKILL...), the runtime's handler for
// one the kernel raised.
func faultHandler()

// rawHandlerAddr and faultHandlerAddr are the handlers' entry
// addresses.
func rawHandlerAddr() uintptr
func faultHandlerAddr() uintptr

// isFault reports whether the kernel raises s for a fault of the
// thread that gets it, which the runtime turns into a panic.
func isFault(s syscall.Signal) bool {
	switch s {
	case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGSYS:
		return true
	}
	return false
}

// catchRaw installs the watcher's handler for each of sigs and feeds c
// from the pipe. It borrows the flags and the sigreturn trampoline of
// the handler the runtime installed for SIGSEGV, which it always does.
// It returns false, having installed nothing, when it cannot; the
// caller then falls back to signal.Notify.
func catchRaw(sigs []syscall.Signal, c chan<- os.Signal) bool {
	if len(sigs) == 0 {
		return true
	}
	var goAct kernelSigaction
	if err := rtSigaction(syscall.SIGSEGV, nil, &goAct); err != nil || goAct.handler <= sigIgn {
		return false
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		logf("catch signals: " + err.Error() + "; falling back to os/signal")
		return false
	}
	rawFD, goHandler = int64(fds[1]), goAct.handler
	for _, s := range sigs {
		act := kernelSigaction{handler: rawHandlerAddr(), flags: goAct.flags, restorer: goAct.restorer, mask: ^uint64(0)}
		if isFault(s) {
			act.handler = faultHandlerAddr()
		}
		if s == syscall.SIGPIPE {
			signal.Ignore(s)
		}
		if err := rtSigaction(s, &act, nil); err != nil {
			logf("catch signal " + itoa(int(s)) + ": " + err.Error())
		}
	}
	go func() {
		r := os.NewFile(uintptr(fds[0]), "signals")
		var b [64]byte
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
	return true
}
