package native

import "deathwatch/supervisor/hostcheck"

// The optional interfaces doctor and demo ask of the native runtime: a
// rename of a method fails the build here instead of dropping a report.
var (
	_ hostcheck.WallsReporter  = (*Native)(nil)
	_ hostcheck.BoundsReporter = (*Native)(nil)
	_ hostcheck.Remainer       = (*Native)(nil)
)
