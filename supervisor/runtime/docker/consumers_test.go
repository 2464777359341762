package docker

import (
	"deathwatch/supervisor/hostcheck"
	"deathwatch/supervisor/reconcile"
)

// The optional interfaces doctor and reconcile ask of the engine: a
// rename of a method fails the build here instead of dropping a report.
var (
	_ hostcheck.BoundsReporter          = (*Engine)(nil)
	_ hostcheck.WatcherVersionCommander = (*Engine)(nil)
	_ reconcile.Sweeper                 = (*Engine)(nil)
)
