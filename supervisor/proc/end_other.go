//go:build !linux

package proc

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotThatProcess is a pid that now belongs to a process with another
// start time: it is never signalled.
var ErrNotThatProcess = errors.New("the pid belongs to another process now")

// End is Linux's alone: without pidfds a signal to a pid whose start
// time was checked can still reach a process that took the pid since.
func End(pid int, start uint64, bound time.Duration) error {
	return fmt.Errorf("pid %d: ending a process by pid and start time: %w", pid, errors.ErrUnsupported)
}
