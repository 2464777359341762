package cli

import (
	"context"
	"deathwatch/supervisor/hostcheck"
	"deathwatch/supervisor/internal/watcherpath"
)

// DemoCmd is `supervisor demo`, what make demo runs: an agent
// command runs in a native box and its output and exit code come back;
// then a stand-in controller is SIGKILLed and the demo shows how long
// the agent tree survived and that nothing was left.
type DemoCmd struct {
	Watcher string `help:"Watcher binary (default: watcher next to the supervisor, then PATH)." placeholder:"PATH"`
	Image   string `help:"Rootfs directory for the boxes (default: the host's root, read-only)." placeholder:"DIR"`
}

// Run is `supervisor demo`. Its journal is the global --journal when
// given, else a temporary folder removed at the end.
func (d *DemoCmd) Run(g *Globals, c *cmdContext) error {
	w, err := watcherpath.Find(d.Watcher, c.self)
	if err != nil {
		return err
	}
	return hostcheck.RunDemo(context.Background(), hostcheck.DemoOptions{
		Supervisor: c.self, Watcher: w, Image: d.Image, Journal: g.Journal, Log: g.logger(c.stderr),
	}, c.stdout)
}
