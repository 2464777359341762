package supervisor

// DoctorCmd is `supervisor doctor`.
type DoctorCmd struct{}

// Run is `supervisor doctor`.
func (d *DoctorCmd) Run(g *Globals, c *cmdContext) error { return UsageError("doctor: not yet") }
