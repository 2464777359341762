package reconcile

import (
	"context"
	"sort"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/journal"
)

// ListVersion is the version of List's rows as `supervisor ls --json`
// prints them (docs/schemas/ls.v1.json).
const ListVersion = 1

// ListOptions is whose boxes List reports.
type ListOptions struct {
	Instance   string
	JournalDir string
	// All includes closed (removed) journal entries.
	All       bool
	EngineEnv []string // for engine CLIs; nil: the process's own
	// Warn receives what List could not read and went on without: a
	// bad journal entry, a runtime the journal names that cannot list
	// (nil: dropped).
	Warn func(error)
}

// Row is one box of the instance: its journal entry beside what its
// runtime reports, or a box with the instance's label that the journal
// does not know.
type Row struct {
	V        int    `json:"v"` // ListVersion
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

// List reports the instance's boxes, sorted by launch id: what the
// journal has (its open entries, every entry with All) and what the
// installed runtimes list under the instance's label. It removes
// nothing.
func List(ctx context.Context, o ListOptions) ([]Row, error) {
	warn := o.Warn
	if warn == nil {
		warn = func(error) {}
	}
	j, err := journal.Open(o.JournalDir, o.Instance, supervisor.Volatile)
	if err != nil {
		return nil, err
	}
	list := j.ListOpen
	if o.All {
		list = j.List
	}
	entries, bad, err := list()
	if err != nil {
		return nil, err
	}
	for _, b := range bad {
		warn(b)
	}

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
		if d.Installed(o.EngineEnv) != nil {
			continue
		}
		rt, err := supervisor.NewRuntime(name, supervisor.RuntimeConfig{EngineEnv: o.EngineEnv})
		if err != nil {
			continue
		}
		ls, err := rt.List(ctx, o.Instance)
		if err != nil {
			if used[name] {
				warn(err)
			}
			continue
		}
		listed[name] = map[string]supervisor.Listed{}
		for _, b := range ls {
			listed[name][b.Name] = b
		}
	}
	var rows []Row
	for _, e := range entries {
		if !e.Open() && !o.All {
			continue
		}
		r := Row{V: ListVersion, Box: e.Box, Runtime: e.Runtime, LaunchID: e.LaunchID, RunKey: e.RunKey, Journal: e.State,
			OwnerPID: e.Owner.PID, Owner: "gone", BoxState: "unknown", Updated: e.Updated.Format(time.RFC3339)}
		if e.Owner.Alive() {
			r.Owner = "alive"
		}
		if m, ok := listed[e.Runtime]; ok {
			r.BoxState = "absent"
			if b, ok := m[e.Box]; ok {
				r.BoxState = boxState(b)
				delete(m, e.Box)
			}
		}
		rows = append(rows, r)
	}
	// Boxes with this instance's label that the journal does not know.
	for rtName, m := range listed {
		for _, b := range m {
			rows = append(rows, Row{V: ListVersion, Box: b.Name, Runtime: rtName, LaunchID: b.Labels[shared.LabelLaunchID],
				RunKey: b.Labels[shared.LabelRunKey], Journal: "none", BoxState: boxState(b), Owner: "unknown"})
		}
	}
	sort.SliceStable(rows, func(a, b int) bool { return rows[a].LaunchID < rows[b].LaunchID })
	return rows, nil
}

func boxState(b supervisor.Listed) string {
	if b.Running {
		return "running"
	}
	return "stopped"
}
