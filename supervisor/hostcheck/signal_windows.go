package hostcheck

import (
	"errors"
	"fmt"
	"os"
)

// freeze is not supported on Windows (no SIGSTOP): the heartbeat and
// deadline paths of prove-deathwatch cannot run there yet.
func freeze(*os.Process) error {
	return fmt.Errorf("freeze the stand-in controller: %w", errors.ErrUnsupported)
}

// thaw does nothing on Windows.
func thaw(*os.Process) error { return nil }

// killPID ends pid (TerminateProcess).
func killPID(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}
