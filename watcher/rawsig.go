//go:build amd64 || arm64

package watcher

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// The watcher catches signals with a handler of its own in assembly
// (rawsig_*.s) that writes the signal's number to a pipe, read by a
// goroutine that hands it to the loop. One rt_sigaction per signal
// installs it, where signal.Notify takes a synchronous round trip to the
// runtime's signal-mask thread per signal, and a thread of its own. It
// is also the only way to catch 32 and 34 (glibc's SIGCANCEL and
// SIGRTMIN, musl's SIGSYNCCALL), which signal.Notify cannot ask for;
// 33 stays the runtime's, for its all-thread system calls.
//
// Nothing is lost by replacing the runtime's handler:
//   - a fault the kernel raised (si_code above 0) goes on to the
//     runtime's handler (faultHandler), which panics;
//   - SIGPIPE is marked ignored for the runtime (signal.Ignore), so a
//     failed write to fd 1 or 2 does not make the os package end the
//     watcher, and the handler over SIG_IGN still brings it to the loop;
//   - a signal blocked when the watcher started is left to
//     signal.Notify, whose thread unblocks it (catchSignals);
//   - between fork and exec the agent keeps the watcher's handler over
//     SIGCONT, SIGTSTP, 32 and 34: one sent then is forwarded to the
//     agent, whom it was for. exec resets them all.

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
