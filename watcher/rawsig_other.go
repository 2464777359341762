//go:build !amd64 && !arm64

package watcher

import (
	"os"
	"syscall"
)

// catchRaw: the watcher's own signal handler exists on amd64 and arm64
// only (see rawsig.go); elsewhere signal.Notify catches what it can and
// signals 32 and 34 keep their default action.
func catchRaw([]syscall.Signal, chan<- os.Signal) bool { return false }
