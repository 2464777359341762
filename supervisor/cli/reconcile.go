package cli

import (
	"context"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/journal"
	"deathwatch/supervisor/reconcile"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// ReconcileCmd is `supervisor reconcile`.
type ReconcileCmd struct {
	Runtime []string      `help:"Runtimes to look at (repeatable; default: ${runtimes_list}, those installed)." enum:"${runtimes}" sep:"none" placeholder:"NAME"`
	JSON    bool          `help:"Print JSON: removed, closed and blocked, each with its reason." name:"json"`
	Prune   time.Duration `help:"Also remove the closed journal entries older than AGE (e.g. 1h; closing writes prune those older than ${retention} on their own)." placeholder:"AGE"`
}

// Help is the long help of reconcile.
func (ReconcileCmd) Help() string {
	return `Run by a controller at start-up, resume or restart. For this --instance it lists the
boxes that carry its label or its record in every installed runtime (and those of its
probes: INSTANCE.doctor for doctor's and --stage's, INSTANCE.prove for prove-deathwatch's
trials, where the journal has a folder for them), and removes a box
only when its labels and nonce match a journal entry AND the supervisor that owned it is
proven gone (its pid is dead, or alive with another start time). A supervisor that
runs on although the controller journaled beside it is proven gone (an orphan: one
started with --detach) is ended first, through a pidfd and only when its pid and start
time match (SIGTERM: it stops its agent and removes its box; SIGKILL after 15s);
--json's "owner" says alive, orphan or gone. Journal entries whose
box is already gone are closed. A box it cannot prove it owns (no journal entry, nonce
mismatch, owner still alive) is never touched: it is reported, and the exit status is
247 (blocked). Running it twice changes nothing the second time.

Exit status: 0 all clean; 247 something is blocked; 240 usage; 244 the journal cannot be read.`
}

// Run is `supervisor reconcile`.
func (r *ReconcileCmd) Run(g *Globals, c *cmdContext) error {
	if !journal.ValidName(g.Instance) {
		return exitcode.Usage("--instance %q: use letters, digits, '_', '.', '-' (at most 128)", g.Instance)
	}
	rep, err := reconcile.Run(context.Background(), reconcile.Options{
		Instance: g.Instance, JournalDir: g.journalDir(), Runtimes: r.Runtime, EngineEnv: c.env, Prune: r.Prune, Log: g.logger(c.stderr),
	})
	if err != nil {
		return err
	}
	if err := c.print(r.JSON, rep, func(w io.Writer) { writeReconcileTable(w, rep) }); err != nil {
		return err
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(c.stderr, "supervisor: reconcile: %s\n", w)
	}
	c.code = rep.ExitCode()
	return nil
}

func writeReconcileTable(w io.Writer, rep *reconcile.Report) {
	all := append(append(append([]reconcile.Item{}, rep.Removed...), rep.Closed...), rep.Blocked...)
	if len(all) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "OUTCOME\tBOX\tRUNTIME\tREASON")
		for _, it := range all {
			box := it.Box
			if it.Instance != "" {
				box += " (" + it.Instance + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.Outcome, box, it.Runtime, it.Reason)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "reconcile %s: %d removed, %d closed, %d blocked\n", rep.Instance, len(rep.Removed), len(rep.Closed), len(rep.Blocked))
}
