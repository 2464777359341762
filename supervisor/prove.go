package supervisor

// ProveCmd is `supervisor prove-deathwatch`.
type ProveCmd struct{}

// Run is `supervisor prove-deathwatch`.
func (p *ProveCmd) Run(g *Globals, c *cmdContext) error {
	return UsageError("prove-deathwatch: not yet")
}
