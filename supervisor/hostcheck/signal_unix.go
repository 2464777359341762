//go:build unix

package hostcheck

import (
	"os"
	"syscall"
)

// freeze stops p (SIGSTOP): a controller that hangs.
func freeze(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }

// thaw lets a frozen p go on (SIGCONT).
func thaw(p *os.Process) error { return p.Signal(syscall.SIGCONT) }

// killPID SIGKILLs pid.
func killPID(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
