//go:build unix

package attach

import (
	"os"
	"os/exec"
	"syscall"
)

// ownProcessGroup starts c in a process group of its own, so that
// killGroup ends the engine client and whatever it started; on Linux
// the client also dies with the supervisor (dieWithParent).
func ownProcessGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(c.SysProcAttr)
}

// killGroup SIGKILLs p's process group.
func killGroup(p *os.Process) { syscall.Kill(-p.Pid, syscall.SIGKILL) }
