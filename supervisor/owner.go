package supervisor

import (
	"bytes"
	"fmt"
	"os"
)

// OwnerProof says whether the supervisor that journaled an entry is
// proven gone, and why, in words a person reads in reconcile's report.
// Gone means: journaled on another boot, its pid no longer exists, or
// the pid now belongs to a process with another start time (pid reuse).
// A process with the journaled pid and start time is the owner, alive.
func (o Owner) Proof() (gone bool, why string) {
	if o.PID <= 0 {
		return false, "the journal names no owner pid"
	}
	if o.BootID != "" {
		if now := BootID(); now != "" && now != o.BootID {
			return true, fmt.Sprintf("owner pid %d ran on another boot (%s)", o.PID, o.BootID)
		}
	}
	if o.PIDNS != 0 {
		if now := PIDNamespace(); now != 0 && now != o.PIDNS {
			return false, fmt.Sprintf("owner pid %d lives in another PID namespace (pid:[%d]); run reconcile where the supervisor ran", o.PID, o.PIDNS)
		}
	}
	st, err := ProcStartTime(o.PID)
	if err != nil {
		return true, fmt.Sprintf("owner pid %d is dead", o.PID)
	}
	if st != o.StartTime {
		return true, fmt.Sprintf("owner pid %d is dead (the pid now belongs to a process started at tick %d, not %d)", o.PID, st, o.StartTime)
	}
	if procZombie(o.PID) {
		return true, fmt.Sprintf("owner pid %d has exited (a zombie not yet reaped)", o.PID)
	}
	return false, fmt.Sprintf("owner pid %d is alive (start time %d)", o.PID, o.StartTime)
}

// procZombie reports whether pid has exited and waits to be reaped
// (state Z or X in /proc/PID/stat).
func procZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}
