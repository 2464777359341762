package shared

import (
	"errors"
	"strconv"
)

// MinPidsLimit is the smallest pids limit a box can live under: the
// watcher is a Go program whose runtime makes a handful of threads (and
// dies when it cannot), it makes spare threads under a pids limit, and
// the agent needs one more. Measured on 2 cores: 8 fails, 10 starts
// /bin/sh; the floor leaves room for a runtime that makes a few more.
const MinPidsLimit = 16

// CheckPidsLimit refuses a pids limit (0: none) the box cannot start
// under, which would otherwise end in the watcher's runtime dump.
func CheckPidsLimit(n int64) error {
	if n > 0 && n < MinPidsLimit {
		return errors.New("--pids-limit " + strconv.FormatInt(n, 10) + ": below " + itoa(MinPidsLimit) + " the watcher (a Go program's threads) and the agent cannot start; allow at least " + itoa(MinPidsLimit))
	}
	return nil
}
