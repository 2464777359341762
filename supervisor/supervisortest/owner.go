// Package supervisortest holds what the tests of the supervisor's
// packages and kernel-tests share. Product code never imports it.
package supervisortest

import (
	"os/exec"
	"testing"

	"deathwatch/supervisor/journal"
	"deathwatch/supervisor/proc"
)

// DeadOwner is the owner record of a process that has exited: a journal
// entry that carries it belongs to a dead supervisor.
func DeadOwner(t testing.TB) journal.Owner {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := proc.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	o := journal.Owner{PID: cmd.Process.Pid, StartTime: st, BootID: proc.BootID()}
	cmd.Process.Kill()
	cmd.Wait()
	return o
}
