//go:build unix

package supervisor

import (
	"os"
	"syscall"
)

// forwarded reports whether s is passed on to the agent (a signal
// frame) rather than ending the box.
func forwarded(s os.Signal) (int, bool) {
	switch s {
	case syscall.SIGUSR1, syscall.SIGUSR2:
		return int(s.(syscall.Signal)), true
	}
	return 0, false
}
