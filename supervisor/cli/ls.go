package cli

import (
	"context"
	"deathwatch/supervisor/journal"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
)

// LsCmd is `supervisor ls`.
type LsCmd struct {
	JSON bool `help:"Print JSON." name:"json"`
	All  bool `help:"Include closed (removed) journal entries (kept ${retention}; see reconcile --prune)."`
}

// LsVersion is the version of ls --json's format
// (docs/schemas/ls.v1.json).
const LsVersion = 1

// LsRow is one box of this instance as ls reports it.
type LsRow struct {
	V        int    `json:"v"` // LsVersion
	Box      string `json:"box"`
	Runtime  string `json:"runtime"`
	LaunchID string `json:"launch_id,omitempty"`
	RunKey   string `json:"run_key,omitempty"`
	Journal  string `json:"journal"`   // the journal state, or "none" for a box the journal does not know
	BoxState string `json:"box_state"` // running | stopped | absent | unknown
	OwnerPID int    `json:"owner_pid,omitempty"`
	Owner    string `json:"owner"` // alive | gone | unknown
	Updated  string `json:"updated,omitempty"`
}

// Run is `supervisor ls`.
func (l *LsCmd) Run(g *Globals, c *cmdContext) error {
	j, err := journal.Open(g.journalDir(), g.Instance, supervisor.Volatile)
	if err != nil {
		return err
	}
	list := j.ListOpen
	if l.All {
		list = j.List
	}
	entries, bad, err := list()
	if err != nil {
		return err
	}
	for _, b := range bad {
		fmt.Fprintf(c.stderr, "supervisor: %v\n", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// What the runtimes report, for those that are installed. A
	// runtime that cannot answer is worth a line only when the journal
	// has boxes on it.
	used := map[string]bool{}
	for _, e := range entries {
		used[e.Runtime] = true
	}
	listed := map[string]map[string]supervisor.Listed{} // runtime → name → box
	for _, d := range supervisor.Descriptors() {
		name := d.Name
		if d.Installed(c.env) != nil {
			continue
		}
		rt, err := supervisor.NewRuntime(name, supervisor.RuntimeConfig{EngineEnv: c.env})
		if err != nil {
			continue
		}
		ls, err := rt.List(ctx, g.Instance)
		if err != nil {
			if used[name] {
				fmt.Fprintf(c.stderr, "supervisor: %v\n", err)
			}
			continue
		}
		listed[name] = map[string]supervisor.Listed{}
		for _, b := range ls {
			listed[name][b.Name] = b
		}
	}
	var rows []LsRow
	for _, e := range entries {
		if !e.Open() && !l.All {
			continue
		}
		r := LsRow{V: LsVersion, Box: e.Box, Runtime: e.Runtime, LaunchID: e.LaunchID, RunKey: e.RunKey, Journal: e.State,
			OwnerPID: e.Owner.PID, Owner: "gone", BoxState: "unknown", Updated: e.Updated.Format(time.RFC3339)}
		if e.Owner.Alive() {
			r.Owner = "alive"
		}
		if m, ok := listed[e.Runtime]; ok {
			r.BoxState = "absent"
			if b, ok := m[e.Box]; ok {
				r.BoxState = state(b)
				delete(m, e.Box)
			}
		}
		rows = append(rows, r)
	}
	// Boxes with this instance's label that the journal does not know.
	for rtName, m := range listed {
		for _, b := range m {
			rows = append(rows, LsRow{V: LsVersion, Box: b.Name, Runtime: rtName, LaunchID: b.Labels[shared.LabelLaunchID],
				RunKey: b.Labels[shared.LabelRunKey], Journal: "none", BoxState: state(b), Owner: "unknown"})
		}
	}
	sort.SliceStable(rows, func(a, b int) bool { return rows[a].LaunchID < rows[b].LaunchID })
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

func state(b supervisor.Listed) string {
	if b.Running {
		return "running"
	}
	return "stopped"
}
