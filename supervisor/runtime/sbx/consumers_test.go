package sbx

import (
	"deathwatch/supervisor/hostcheck"
	"deathwatch/supervisor/reconcile"
)

// The optional interfaces doctor, prove-deathwatch and reconcile ask of
// the sandbox runtime: a rename of a method fails the build here
// instead of dropping a report.
var (
	_ hostcheck.WallsReporter  = (*Runtime)(nil)
	_ hostcheck.BoundsReporter = (*Runtime)(nil)
	_ hostcheck.ProcessCounter = (*Runtime)(nil)
	_ reconcile.NonceReader    = (*Runtime)(nil)
)
