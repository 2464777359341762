//go:build unix

package cli

import (
	"os"
	"syscall"
)

// execSignals are what exec handles: the first SIGINT, SIGTERM or
// SIGHUP stops the agent, a second ends the box; SIGUSR1 and SIGUSR2
// are passed on to the agent.
var execSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2}

// ignoredSignals are taken as error returns instead of killing the
// supervisor before it removes the box (a closed stdout: SIGPIPE).
var ignoredSignals = []os.Signal{syscall.SIGPIPE}
