//go:build !amd64 && !arm64

package watcher

import "os"

// catchReserved: signals 32 and 34 are caught on amd64 and arm64 only
// (see reserved.go); elsewhere they keep their default action.
func catchReserved(*sigState, chan<- os.Signal) {}
