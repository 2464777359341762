package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"deathwatch/supervisor/reconcile"
)

// LsCmd is `supervisor ls`.
type LsCmd struct {
	JSON bool `help:"Print JSON." name:"json"`
	All  bool `help:"Include closed (removed) journal entries (kept ${retention}; see reconcile --prune)."`
}

// LsVersion is the version of ls --json's format
// (docs/schemas/ls.v1.json).
const LsVersion = reconcile.ListVersion

// LsRow is one box of this instance as ls reports it.
type LsRow = reconcile.Row

// Run is `supervisor ls`.
func (l *LsCmd) Run(g *Globals, c *cmdContext) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := reconcile.List(ctx, reconcile.ListOptions{
		Instance: g.Instance, JournalDir: g.journalDir(), All: l.All, EngineEnv: c.env,
		Warn: func(err error) { fmt.Fprintf(c.stderr, "supervisor: %v\n", err) },
	})
	if err != nil {
		return err
	}
	if l.JSON {
		if rows == nil {
			rows = []LsRow{}
		}
		return c.print(true, rows, nil)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BOX\tRUNTIME\tJOURNAL\tBOX STATE\tOWNER\tRUN KEY")
	for _, r := range rows {
		owner := r.Owner
		if r.OwnerPID > 0 {
			owner = fmt.Sprintf("%d (%s)", r.OwnerPID, r.Owner)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Box, r.Runtime, r.Journal, r.BoxState, owner, r.RunKey)
	}
	return tw.Flush()
}
