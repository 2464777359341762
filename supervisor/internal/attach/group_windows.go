package attach

import (
	"os"
	"os/exec"
)

// ownProcessGroup does nothing on Windows: there are no process groups
// to signal (a job object would be the equivalent; not yet done).
func ownProcessGroup(*exec.Cmd) {}

// killGroup ends the engine client alone (TerminateProcess): a process
// it started itself may outlive it on Windows.
func killGroup(p *os.Process) { p.Kill() }
