package journal

import (
	"errors"
	"fmt"
	"os"

	"deathwatch/supervisor/proc"
)

// SelfOwner is the Owner record of this process.
func SelfOwner() (Owner, error) {
	st, err := proc.StartTime(os.Getpid())
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return Owner{}, fmt.Errorf("read own start time: %w", err)
	}
	return Owner{PID: os.Getpid(), StartTime: st, BootID: proc.BootID(), PIDNS: proc.SelfPIDNamespace()}, nil
}

// Alive reports whether the owner may still run: it names a pid and
// Proof cannot show it gone.
func (o Owner) Alive() bool {
	if o.PID <= 0 {
		return false
	}
	gone, _ := o.Proof()
	return !gone
}

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
		if now := proc.BootID(); now != "" && now != o.BootID {
			return true, fmt.Sprintf("owner pid %d ran on another boot (%s)", o.PID, o.BootID)
		}
	}
	if o.PIDNS != 0 {
		if now := proc.SelfPIDNamespace(); now != 0 && now != o.PIDNS {
			return false, fmt.Sprintf("owner pid %d lives in another PID namespace (pid:[%d]); run reconcile where the supervisor ran", o.PID, o.PIDNS)
		}
	}
	st, err := proc.StartTime(o.PID)
	if errors.Is(err, errors.ErrUnsupported) {
		// Windows: no start time to tell the owner from a reused pid.
		return false, fmt.Sprintf("owner pid %d: this system cannot tell whether it still runs", o.PID)
	}
	if err != nil {
		return true, fmt.Sprintf("owner pid %d is dead", o.PID)
	}
	if st != o.StartTime {
		return true, fmt.Sprintf("owner pid %d is dead (the pid now belongs to a process started at tick %d, not %d)", o.PID, st, o.StartTime)
	}
	if proc.Zombie(o.PID) {
		return true, fmt.Sprintf("owner pid %d has exited (a zombie not yet reaped)", o.PID)
	}
	return false, fmt.Sprintf("owner pid %d is alive (start time %d)", o.PID, o.StartTime)
}
