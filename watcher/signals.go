package watcher

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The watcher's signal contract, tini's unless docs/watcher.md says
// otherwise:
//
//   - Every signal it can catch is caught from the start of Main, before
//     the flags are read and before the agent exists, and buffered: a
//     signal sent the moment the agent starts is forwarded once.
//   - It forwards to the agent's pid (tini's default), never to its
//     process group.
//   - The agent starts with the signal mask the watcher was started with
//     (the Go runtime keeps it for every child) and with the signals the
//     watcher was started with ignored still ignored, as far as the
//     runtime lets the watcher know them (see startIgnored).
//   - The Go runtime owns SIGURG (preemption), SIGPROF (profiling) and
//     signals 32-34; see rawsig.go for 32 and 34.

// sigRTMin is the kernel's first real-time signal; glibc reserves 32
// and 33 and calls 34 SIGRTMIN, and the Go runtime reserves all three.
const sigRTMin = syscall.Signal(32)

// numSig is one more than the highest signal number.
const numSig = 65

// sigState is the signal state the watcher was started with, as far as
// it can be known once the Go runtime runs.
type sigState struct {
	ignored [numSig]bool
}

// startState reads the signal state the watcher was started with. It
// must run before anything asks for a signal (signal.Notify installs a
// handler, and the disposition it replaced is gone).
func startState() *sigState {
	st := &sigState{}
	for s := syscall.Signal(1); s < numSig; s++ {
		st.ignored[s] = startIgnored(s)
	}
	return st
}

// startIgnored reports whether s was ignored when the watcher started.
// The Go runtime installs its own handler for most signals before main
// runs and keeps the disposition it replaced to itself; what is still
// visible is SIGHUP and SIGINT (the runtime leaves an inherited SIG_IGN
// of those in place and says so through signal.Ignored), the job
// control signals SIGCONT, SIGTSTP, SIGTTIN and SIGTTOU, and signals 32
// and 34, which it does not touch. Any other signal ignored at start is
// caught and forwarded, and the agent starts with its default action.
func startIgnored(s syscall.Signal) bool {
	if signal.Ignored(s) {
		return true
	}
	h, err := sigHandler(s)
	return err == nil && h == sigIgn
}

// The handler values of a sigaction.
const (
	sigDfl = 0
	sigIgn = 1
)

// kernelSigaction is struct sigaction as rt_sigaction(2) takes it on
// amd64 and arm64.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

func rtSigaction(s syscall.Signal, act, old *kernelSigaction) error {
	_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(s), uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
	if e != 0 {
		return os.NewSyscallError("rt_sigaction", e)
	}
	return nil
}

// sigHandler is the current handler of s: sigDfl, sigIgn or an address.
func sigHandler(s syscall.Signal) (uintptr, error) {
	var old kernelSigaction
	err := rtSigaction(s, nil, &old)
	return old.handler, err
}

// caught reports whether the watcher catches s (unless ignored at
// start): not SIGKILL and SIGSTOP, not the runtime's SIGPROF and signal
// 33, and not SIGURG, which the runtime sends itself many times a
// second to preempt goroutines; neither tini nor the kernel tells a
// SIGURG from the runtime's apart from one a user sent, so it is never
// forwarded.
func caught(s syscall.Signal) bool {
	switch s {
	case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGPROF, syscall.SIGURG, sigRTMin + 1:
		return false
	}
	return s > 0 && s < numSig
}

// notifiable reports whether signal.Notify can deliver s at all: a
// caught signal but 32 and 34, which only the watcher's own handler
// catches (rawsig.go).
func notifiable(s syscall.Signal) bool {
	return caught(s) && s != sigRTMin && s != sigRTMin+2
}

// forwarded reports whether a caught signal goes on to the agent:
// everything but SIGCHLD (the watcher's own) and SIGTTIN and SIGTTOU,
// which tini ignores too (they would only stop a watcher that writes to
// or reads from a terminal it no longer has in the foreground).
func forwarded(s syscall.Signal) bool {
	switch s {
	case syscall.SIGCHLD, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGURG:
		return false
	}
	return true
}

// catchSignals asks for every signal the watcher handles, at once: a
// signal that arrives before the agent exists waits in the channel. A
// signal ignored at start stays ignored (in the watcher and, so, in the
// agent) and is not asked for. The watcher's own handler (rawsig.go)
// catches the rest, but those blocked at start: no thread of the
// runtime's would ever take them, so os/signal does, on its
// signal-mask thread. The channel is large enough for one of each.
func catchSignals(st *sigState) chan os.Signal {
	c := make(chan os.Signal, 2*numSig)
	blocked := blockedAtStart()
	// On the stack: appends would leave a slice of each size on the heap.
	var rawBuf, notifyBuf [numSig]syscall.Signal
	raw, notify := rawBuf[:0], notifyBuf[:0]
	for s := syscall.Signal(1); s < numSig; s++ {
		switch {
		case !caught(s) || st.ignored[s]:
		case blocked&sigBit(s) != 0:
			notify = append(notify, s)
		case s != sigRTMin && s != sigRTMin+2:
			raw = append(raw, s)
		}
	}
	// 32 and 34 last: the runtime catches neither, so /proc/PID/status
	// shows the watcher's catch complete once SigCgt has 34.
	for _, s := range []syscall.Signal{sigRTMin, sigRTMin + 2} {
		if !st.ignored[s] {
			raw = append(raw, s)
		}
	}
	// os/signal first, for the same reason.
	notifyAll(c, notify)
	if !catchRaw(raw, c) {
		notifyAll(c, raw)
	}
	return c
}

// notifyAll asks os/signal for each of sigs it can deliver.
func notifyAll(c chan<- os.Signal, sigs []syscall.Signal) {
	var n []os.Signal
	for _, s := range sigs {
		if notifiable(s) {
			n = append(n, s)
		}
	}
	if len(n) > 0 {
		signal.Notify(c, n...)
	}
}

// sigBit is s in a kernel signal set.
func sigBit(s syscall.Signal) uint64 { return 1 << (uint(s) - 1) }

// blockedAtStart is the signal mask of the calling thread: the one the
// watcher was started with, less the signals the runtime unblocks on
// every thread it runs (docs/watcher.md lists them).
func blockedAtStart() uint64 {
	var set uint64
	_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_BLOCK, 0, uintptr(unsafe.Pointer(&set)), 8, 0, 0)
	if e != 0 {
		return ^uint64(0) // unknown: os/signal for all
	}
	return set
}
