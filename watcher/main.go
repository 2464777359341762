package watcher

import (
	"os"
	"strings"

	"deathwatch/shared"
)

// Main runs the watcher and returns its exit status.
func Main(args []string) int {
	// Signals first: one sent while the watcher starts is forwarded.
	st := startState()
	sigs := catchSignals(st)
	cfg, err := parseFlags(args)
	if err != nil {
		logf(err.Error())
		if err == errRootRefused {
			return shared.ExitRefused
		}
		return shared.ExitUsage
	}
	switch {
	case cfg.Help:
		os.Stdout.WriteString(usage)
		return 0
	case cfg.Version:
		os.Stdout.WriteString("watcher " + shared.Version + " (protocol " + itoa(shared.ProtocolVersion) + ")\n")
		return 0
	}
	if os.Getpid() != 1 {
		return reexecAsInit(cfg, sigs)
	}
	return newWatcher(cfg, sigs).run()
}

// logf writes one line to the watcher's own stderr; never into frames.
func logf(msg string) {
	os.Stderr.WriteString("watcher: " + strings.TrimSuffix(msg, "\n") + "\n")
}
