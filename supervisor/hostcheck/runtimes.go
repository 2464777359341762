package hostcheck

import (
	"context"
	"os/exec"

	"deathwatch/supervisor"
)

// What doctor, prove-deathwatch and demo ask of a runtime beyond
// supervisor.Runtime. A runtime satisfies each by having the method;
// its test file asserts so (var _ hostcheck.X = ...), so a rename
// cannot silently drop a report.

// WallsReporter is a runtime that says plainly what its boxes' walls
// leave open on this host; doctor prints it.
type WallsReporter interface {
	Walls() []string
}

// BoundsReporter is a runtime that says which bounds its boxes get by
// default on this host; doctor prints them.
type BoundsReporter interface {
	Bounds() []string
}

// WatcherVersionCommander is a runtime that can run the watcher baked
// into an image on its own, for doctor: the command runs it with
// --version in a throwaway box (no network, no privileges, removed at
// once).
type WatcherVersionCommander interface {
	WatcherVersionCommand(ctx context.Context, image, path string) *exec.Cmd
}

// ProcessCounter is a runtime whose boxes' processes the host cannot
// see (supervisor.CapNoHostProcesses) but can count from inside the
// box: prove-deathwatch polls it to watch the agent die, its resolution
// one round trip into the box.
type ProcessCounter interface {
	// CountProcesses counts the processes in the box whose environment
	// holds env (NAME=VALUE).
	CountProcesses(ctx context.Context, b *supervisor.Box, env string) (int, error)
}

// Remainer is a runtime whose boxes hold host objects of their own
// beyond processes (native as root: its cgroup folders), so that the
// demo can show them and check that reconcile removed them.
type Remainer interface {
	// Remains names the kind ("cgroup") and host paths of what b holds.
	Remains(b *supervisor.Box) (kind string, paths []string)
}
