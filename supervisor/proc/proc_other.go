//go:build !linux && !darwin

package proc

import (
	"errors"
	"fmt"
	"time"
)

// StartTime is not known on this system.
func StartTime(pid int) (uint64, error) {
	return 0, fmt.Errorf("start time of pid %d: %w", pid, errors.ErrUnsupported)
}

// Zombie is never known on this system.
func Zombie(int) bool { return false }

// BootID is not known on this system.
func BootID() string { return "" }

// BootTime is not known on this system.
func BootTime() time.Time { return time.Time{} }
