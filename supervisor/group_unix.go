//go:build unix

package supervisor

import (
	"os"
	"os/exec"
	"syscall"
)

// ownProcessGroup starts c in a process group of its own, so that
// killGroup ends the engine client and whatever it started.
func ownProcessGroup(c *exec.Cmd) { c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// killGroup SIGKILLs p's process group.
func killGroup(p *os.Process) { syscall.Kill(-p.Pid, syscall.SIGKILL) }
