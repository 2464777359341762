package ktest

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// DefaultIgnoredSignals sets every signal this process was started with
// ignored back to its default action, so the processes the tests start
// inherit what a user's shell would give them. An ignored disposition
// survives fork and exec, and an init rightly keeps a signal ignored
// that it was started with ignored: a suite started under nohup (SIGHUP
// ignored), GNU make (signals 32 and 33) or a CI runner that ignores
// SIGPIPE would otherwise test boxes no user has, and "kill -HUP $$" in
// an agent would do nothing. Only ignored signals are touched: the Go
// runtime handles none of them (it leaves an inherited SIG_IGN alone),
// so its own handlers are not disturbed.
//
// Every kernel-test binary calls it first, from TestMain.
func DefaultIgnoredSignals() error {
	mask, err := ignoredMask(os.Getpid())
	if err != nil {
		return err
	}
	// struct kernel_sigaction on amd64 and arm64: handler, flags,
	// restorer, mask; all zero is SIG_DFL with nothing blocked.
	var sa struct{ handler, flags, restorer, mask uint64 }
	for sig := 1; sig <= 64; sig++ {
		if mask&(1<<(sig-1)) == 0 || sig == int(syscall.SIGKILL) || sig == int(syscall.SIGSTOP) {
			continue
		}
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0); e != 0 {
			return fmt.Errorf("reset signal %d to its default action: %w", sig, e)
		}
	}
	if mask, err = ignoredMask(os.Getpid()); err != nil {
		return err
	}
	if mask != 0 {
		return fmt.Errorf("signals still ignored after the reset (SigIgn %#x)", mask)
	}
	return nil
}

// ignoredMask is SigIgn of /proc/PID/status: bit N-1 set when signal N
// is ignored.
func ignoredMask(pid int) (uint64, error) {
	v, err := StatusField(pid, "SigIgn")
	if err != nil {
		return 0, err
	}
	mask, err := strconv.ParseUint(v, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("parse SigIgn %q of process %d: %w", v, pid, err)
	}
	return mask, nil
}
