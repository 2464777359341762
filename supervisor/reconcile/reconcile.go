// Package reconcile removes an instance's leftovers whose ownership it
// can prove from the journal (labels, nonce, an owner proven gone),
// closes journal entries whose box is gone, and reports the rest (Run);
// List reports an instance's boxes, journal beside runtime, removing
// nothing. A Go controller runs both for its own instance.
package reconcile

import (
	"context"
	"deathwatch/supervisor/journal"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/internal/instance"
	"deathwatch/supervisor/internal/journalbox"
	"deathwatch/supervisor/proc"
)

// Reconcile outcomes.
const (
	Removed = "removed" // the box matched a journal entry, its owner is proven gone: removed and closed
	Closed  = "closed"  // the journal entry's box was already gone: closed
	Blocked = "blocked" // ownership not proven: left alone and reported
)

// Options is `supervisor reconcile` as plain data.
type Options struct {
	Instance   string
	JournalDir string
	// Runtimes to look at; empty: every registered runtime. An engine
	// whose CLI is not installed is skipped unless the journal names it.
	Runtimes  []string
	EngineEnv []string // for engine CLIs; nil: the process's own
	// Prune, when set, removes the closed journal entries older than it
	// (journal.Journal.Prune); closing writes prune those older than
	// journal.DefaultRetention on their own.
	Prune time.Duration
	Log   *slog.Logger
}

// Item is one box or journal entry and what reconcile did.
type Item struct {
	Outcome  string `json:"outcome"`
	Box      string `json:"box,omitempty"`
	Runtime  string `json:"runtime"`
	LaunchID string `json:"launch_id,omitempty"`
	// Instance is set for a box of the instance's probes (supervisor/internal/instance:
	// Probe, Prove), empty for the instance's own.
	Instance string `json:"instance,omitempty"`
	// Owner is what became of the supervisor that owned the box:
	// OwnerAlive, OwnerOrphan (alive, its controller gone: ended) or
	// OwnerGone; "" when no journal entry names one.
	Owner  string `json:"owner,omitempty"`
	Reason string `json:"reason"`
}

// What reconcile found of a journal entry's owner (Item.Owner).
const (
	OwnerAlive  = "alive"  // the supervisor runs, and so does its controller (or none is recorded)
	OwnerOrphan = "orphan" // the supervisor ran on after its controller died: reconcile ended it
	OwnerGone   = "gone"   // the supervisor is proven gone
)

// orphanBound is how long an orphan supervisor has between SIGTERM
// (it stops its agent with its grace, then removes its box) and SIGKILL.
const orphanBound = 15 * time.Second

// ownerState decides on an entry's owner: gone when proven so, else an
// orphan when the controller it journaled is proven gone, else alive.
// An owner whose controller is not known (none journaled, a descriptor's
// other end) is alive. Pure: the proofs are passed in.
func ownerState(ownerGone bool, ctrl *journal.ControllerRecord, ctrlGone bool) string {
	switch {
	case ownerGone:
		return OwnerGone
	case ctrl != nil && ctrl.PID > 0 && ctrlGone:
		return OwnerOrphan
	}
	return OwnerAlive
}

// ownerProof is entry.Owner.Proof, with an orphan owner ended first:
// a supervisor alive whose journaled controller is proven gone gets
// SIGTERM (it stops its agent and removes its box), SIGKILL after
// orphanBound, and is then gone. It returns the entry as the journal
// now has it (the ended owner may have closed it).
func ownerProof(j *journal.Journal, e *journal.Entry, log *slog.Logger) (cur *journal.Entry, state string, gone bool, why string) {
	gone, why = e.Owner.Proof()
	ctrlGone, ctrlWhy := false, ""
	if !gone && e.Controller != nil && e.Controller.PID > 0 {
		ctrlGone, ctrlWhy = e.Controller.Owner.Proof()
	}
	state = ownerState(gone, e.Controller, ctrlGone)
	if state != OwnerOrphan {
		return e, state, gone, why
	}
	log.Info("reconcile: ending an orphan supervisor", "pid", e.Owner.PID, "box", e.Box, "controller", ctrlWhy)
	if err := proc.End(e.Owner.PID, e.Owner.StartTime, orphanBound); err != nil {
		return e, OwnerAlive, false, fmt.Sprintf("%s, an orphan (its controller: %s), but ending it failed: %v", why, strings.Replace(ctrlWhy, "owner ", "", 1), err)
	}
	why = fmt.Sprintf("owner pid %d was an orphan (its controller: %s) and was ended", e.Owner.PID, strings.Replace(ctrlWhy, "owner ", "", 1))
	if now, err := j.Get(e.LaunchID); err == nil {
		e = now
	}
	return e, OwnerOrphan, true, why
}

// ReportVersion is the version of reconcile --json's format
// (docs/schemas/reconcile.v1.json).
const ReportVersion = 1

// Report is the result; Blocked not empty means exit BLOCKED.
type Report struct {
	V        int      `json:"v"` // ReportVersion
	Instance string   `json:"instance"`
	Removed  []Item   `json:"removed"`
	Closed   []Item   `json:"closed"`
	Blocked  []Item   `json:"blocked"`
	Warnings []string `json:"warnings,omitempty"`
	// Pruned is how many closed journal entries --prune removed.
	Pruned int `json:"pruned,omitempty"`
}

func (r *Report) add(it Item) {
	switch it.Outcome {
	case Removed:
		r.Removed = append(r.Removed, it)
	case Closed:
		r.Closed = append(r.Closed, it)
	default:
		it.Outcome = Blocked
		r.Blocked = append(r.Blocked, it)
	}
}

// ExitCode is 0, or shared.ExitBlocked when anything was left unproven.
func (r *Report) ExitCode() int {
	if len(r.Blocked) > 0 {
		return shared.ExitBlocked
	}
	return 0
}

// boxProof decides whether a listed box may be removed on the strength
// of entry (nil: the journal has none for it). It returns "" when every
// label matches and the owner is proven gone, else why not. Pure: the
// owner proof is passed in.
func boxProof(instance, runtime string, b supervisor.Listed, entry *journal.Entry, ownerGone bool, ownerWhy string) string {
	lb := b.Labels
	switch {
	case lb[shared.LabelInstance] != instance:
		return fmt.Sprintf("labelled for instance %q, not %q", lb[shared.LabelInstance], instance)
	case lb[shared.LabelManaged] != "true":
		return "no " + shared.LabelManaged + "=true label"
	case lb[shared.LabelLaunchID] == "" || lb[shared.LabelNonce] == "":
		return "no launch id or nonce label"
	case entry == nil:
		return fmt.Sprintf("no journal entry for launch %s", lb[shared.LabelLaunchID])
	case entry.Instance != instance:
		return fmt.Sprintf("the journal entry is for instance %q", entry.Instance)
	case entry.Runtime != runtime:
		return fmt.Sprintf("the journal entry is for runtime %s, the box is in %s", entry.Runtime, runtime)
	case entry.Box != b.Name:
		return fmt.Sprintf("the journal entry names box %s", entry.Box)
	case entry.Nonce == "" || lb[shared.LabelNonce] != entry.Nonce:
		return "nonce mismatch: the box's nonce label is not the journaled one"
	case !ownerGone:
		return ownerWhy + "; its box is not reconcile's to remove"
	}
	return ""
}

// Reconcile removes this instance's leftovers that it can prove it owns,
// closes journal entries whose box is gone, and reports the rest. The
// boxes of the instance's probes (doctor's and exec's staging probe,
// prove-deathwatch's trials) are its leftovers too: a supervisor killed
// mid-probe leaves them under their own instance, which reconcile also
// looks at when the journal has a folder for it (its entries are
// written before its boxes exist).
func Run(ctx context.Context, o Options) (*Report, error) {
	rep := &Report{V: ReportVersion, Instance: o.Instance, Removed: []Item{}, Closed: []Item{}, Blocked: []Item{}}
	if err := reconcileInstance(ctx, o, o.Instance, rep); err != nil {
		return nil, err
	}
	for _, probe := range []string{instance.Probe(o.Instance), instance.Prove(o.Instance)} {
		if fi, err := os.Lstat(filepath.Join(o.JournalDir, probe)); err != nil || !fi.IsDir() || !journal.ValidName(probe) {
			continue
		}
		sub := &Report{}
		if err := reconcileInstance(ctx, o, probe, sub); err != nil {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("instance %s: %v", probe, err))
			continue
		}
		for _, items := range [][]Item{sub.Removed, sub.Closed, sub.Blocked} {
			for _, it := range items {
				it.Instance = probe
				rep.add(it)
			}
		}
		rep.Pruned += sub.Pruned
		for _, w := range sub.Warnings {
			if !contains(rep.Warnings, w) {
				rep.Warnings = append(rep.Warnings, w)
			}
		}
	}
	return rep, nil
}

// pass is one instance's reconcile: its journal, what the runtimes
// listed, and the report it adds to.
type pass struct {
	o        Options
	instance string
	log      *slog.Logger
	j        *journal.Journal
	rep      *Report
	entries  []*journal.Entry
	byLaunch map[string]*journal.Entry
	// inJournal names the runtimes an open entry names.
	inJournal map[string]bool
	// seen holds the launch ids whose box was listed.
	seen        map[string]bool
	rts         map[string]supervisor.Runtime
	unreachable map[string]string // runtime → why it cannot be listed
	listed      map[string][]supervisor.Listed
}

// reconcileInstance is Reconcile for one instance's journal and boxes,
// into rep.
func reconcileInstance(ctx context.Context, o Options, instance string, rep *Report) error {
	p := &pass{o: o, instance: instance, log: o.Log, rep: rep, seen: map[string]bool{}}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if err := p.readJournal(); err != nil {
		return err
	}
	if o.Prune > 0 {
		n, err := p.j.Prune(o.Prune, time.Now())
		if err != nil {
			rep.Warnings = append(rep.Warnings, err.Error())
		}
		rep.Pruned += n
	}
	names := p.listRuntimes(ctx)
	for _, name := range names {
		for _, b := range p.listed[name] {
			p.listedBox(ctx, name, b)
		}
	}
	for _, e := range p.entries {
		if e = p.byLaunch[e.LaunchID]; e.Open() && !p.seen[e.LaunchID] {
			p.unlistedEntry(ctx, e)
		}
	}
	return nil
}

// readJournal opens the instance's journal and reads its entries. An
// entry that cannot be read (torn, planted, not a regular file) proves
// nothing and may stand for a box: blocked, never skipped with a
// warning.
func (p *pass) readJournal() error {
	j, err := journal.Open(p.o.JournalDir, p.instance, supervisor.Volatile)
	if err != nil {
		return err
	}
	p.j = j
	entries, bad, err := j.ListOpen()
	if err != nil {
		return err
	}
	for _, b := range bad {
		if lost := (*journal.LostEntryError)(nil); errors.As(b, &lost) {
			// Its box ended with the power, was never created, or was gone
			// before the write (see journal.Journal.Put): closed.
			if err := os.Remove(lost.Path); err == nil {
				p.rep.add(Item{Outcome: Closed, Runtime: "journal", LaunchID: lost.LaunchID, Reason: lost.Error() + "; removed"})
				continue
			}
		}
		p.rep.add(Item{Runtime: "journal", Reason: b.Error() + "; look at it, then remove it by hand"})
	}
	pruneJournalTemps(j.Dir(), staleTemp)
	p.entries = entries
	p.byLaunch = map[string]*journal.Entry{}
	p.inJournal = map[string]bool{}
	for _, e := range entries {
		p.byLaunch[e.LaunchID] = e
		if e.Open() {
			p.inJournal[e.Runtime] = true
		}
	}
	return nil
}

// listRuntimes lists the instance's boxes on every runtime asked for
// and every runtime an open entry names, known or not (an entry whose
// runtime cannot be listed stays open and blocks). It returns the
// runtimes' names, sorted.
func (p *pass) listRuntimes(ctx context.Context) []string {
	names := p.o.Runtimes
	if len(names) == 0 {
		names = supervisor.RuntimeNames()
	}
	for rt := range p.inJournal {
		if !contains(names, rt) {
			names = append(names, rt)
		}
	}
	sort.Strings(names)

	cfg := supervisor.RuntimeConfig{Log: p.log, EngineEnv: p.o.EngineEnv}
	p.rts = map[string]supervisor.Runtime{}
	p.unreachable = map[string]string{}
	p.listed = map[string][]supervisor.Listed{}
	for _, name := range names {
		desc, ok := supervisor.Lookup(name)
		if !ok {
			p.unreachable[name] = "not a runtime this supervisor knows"
			continue
		}
		if err := desc.Installed(p.o.EngineEnv); err != nil {
			p.unreachable[name] = err.Error()
			continue
		}
		rt, err := supervisor.NewRuntime(name, cfg)
		if err != nil {
			p.unreachable[name] = err.Error()
			continue
		}
		// One List per runtime asks which boxes carry this instance's
		// label, and with what labels: only a launch id and nonce that
		// match an entry prove a box is its, which a name (idslot's
		// Exists) cannot; Sweep asks the engine nothing.
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ls, err := rt.List(lctx, p.instance)
		cancel()
		if err != nil {
			p.unreachable[name] = err.Error()
			continue
		}
		p.rts[name] = rt
		p.listed[name] = ls
	}
	for name, why := range p.unreachable {
		if p.inJournal[name] {
			continue // reported per entry
		}
		if contains(p.o.Runtimes, name) {
			p.rep.Warnings = append(p.rep.Warnings, fmt.Sprintf("%s: %s", name, why))
		}
	}
	return names
}

// listedBox decides on one box a runtime listed with the instance's
// label: removed when the journal proves it ours and its owner gone,
// else blocked with why.
func (p *pass) listedBox(ctx context.Context, name string, b supervisor.Listed) {
	entry := p.byLaunch[b.Labels[shared.LabelLaunchID]]
	if id := b.Labels[shared.LabelLaunchID]; entry == nil && journal.ValidName(id) {
		// A box whose entry is closed: the closed entry still proves it
		// ours.
		entry, _ = p.j.Get(id)
	}
	it := Item{Box: b.Name, Runtime: name, LaunchID: b.Labels[shared.LabelLaunchID]}
	nonceWhy := ""
	if nr, ok := p.rts[name].(NonceReader); ok && entry != nil && b.Labels[shared.LabelNonce] == "" {
		b.Labels, nonceWhy = withNonce(ctx, nr, b)
	}
	gone, ownerWhy := false, ""
	if entry != nil && boxProof(p.instance, name, b, entry, true, "") == "" {
		// Ours by every label: whose owner may be an orphan to end.
		entry, it.Owner, gone, ownerWhy = ownerProof(p.j, entry, p.log)
		p.byLaunch[entry.LaunchID] = entry
		if it.Owner == OwnerOrphan && !entry.Open() {
			// The ended owner removed its box and closed its entry.
			p.seen[entry.LaunchID] = true
			it.Outcome, it.Reason = Removed, ownerWhy+"; it removed its box"
			p.rep.add(it)
			return
		}
	}
	if why := boxProof(p.instance, name, b, entry, gone, ownerWhy); why != "" {
		if nonceWhy != "" && b.Labels[shared.LabelNonce] == "" {
			why = nonceWhy
		}
		if entry != nil && entry.Box == b.Name && entry.Runtime == name {
			p.seen[entry.LaunchID] = true
		}
		it.Reason = why
		p.rep.add(it)
		p.log.Warn("reconcile: blocked", "box", b.Name, "runtime", name, "why", why)
		return
	}
	p.seen[entry.LaunchID] = true
	it.Outcome, it.Reason = removeProven(ctx, p.j, p.rts[name], entry, ownerWhy)
	p.rep.add(it)
}

// unlistedEntry decides on an open entry whose box no runtime listed:
// closed when its owner is proven gone (the runtime's unlisted remains
// removed first), else left open and blocked.
func (p *pass) unlistedEntry(ctx context.Context, e *journal.Entry) {
	it := Item{Box: e.Box, Runtime: e.Runtime, LaunchID: e.LaunchID}
	if why, ok := p.unreachable[e.Runtime]; ok {
		it.Reason = fmt.Sprintf("cannot see %s boxes (%s); the journal entry (%s) stays open", e.Runtime, why, e.State)
		p.rep.add(it)
		return
	}
	e, state, gone, ownerWhy := ownerProof(p.j, e, p.log)
	it.Owner = state
	if state == OwnerOrphan && !e.Open() {
		it.Outcome, it.Reason = Removed, ownerWhy+"; it removed its box"
		p.rep.add(it)
		return
	}
	if !gone {
		it.Reason = ownerWhy + "; its launch is in progress (" + e.State + ")"
		p.rep.add(it)
		return
	}
	if desc, _ := supervisor.Lookup(e.Runtime); desc.Has(supervisor.CapUnlistedRemains) {
		// The box's remains (native: an empty cgroup) have no label
		// to list; Remove works from the journaled state and is a
		// no-op when nothing is left.
		if err := p.rts[e.Runtime].Remove(ctx, journalbox.FromEntry(e)); err != nil {
			it.Reason = fmt.Sprintf("remove %s remains: %v; the journal entry stays open", e.Runtime, err)
			p.rep.add(it)
			return
		}
	}
	sweep(p.rts[e.Runtime], e)
	e.State, e.Error = journal.StateRemoved, ""
	if err := p.j.Put(e); err != nil {
		it.Reason = fmt.Sprintf("close journal entry: %v", err)
		p.rep.add(it)
		return
	}
	it.Outcome, it.Reason = Closed, "box gone; "+ownerWhy
	p.rep.add(it)
}

// withNonce is b's labels with the nonce read from inside the box (a
// runtime whose boxes carry no nonce label). A nonce that cannot be
// read is left out, so that boxProof blocks the box, and why says so.
func withNonce(ctx context.Context, nr NonceReader, b supervisor.Listed) (labels map[string]string, why string) {
	lb := make(map[string]string, len(b.Labels)+1)
	for k, v := range b.Labels {
		lb[k] = v
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := nr.ReadNonce(rctx, &supervisor.Box{Name: b.Name, Labels: b.Labels})
	if err != nil {
		return lb, fmt.Sprintf("cannot read the nonce from inside the box: %v", err)
	}
	lb[shared.LabelNonce] = n
	return lb, ""
}

// staleTemp is the age past which a journal temp file is a leftover
// of a killed write (a write takes milliseconds).
const staleTemp = 10 * time.Minute

// pruneJournalTemps removes the temp files that killed writes left in
// the journal directory (".NAME.json.tmp-*" older than age).
func pruneJournalTemps(dir string, age time.Duration) {
	tmps, _ := filepath.Glob(filepath.Join(dir, ".*.json.tmp-*"))
	for _, p := range tmps {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && time.Since(fi.ModTime()) > age {
			os.Remove(p)
		}
	}
}

// removeProven removes a box whose ownership is proven: removal intent
// journaled first, then the removal, then the entry closed.
func removeProven(ctx context.Context, j *journal.Journal, rt supervisor.Runtime, e *journal.Entry, ownerWhy string) (outcome, reason string) {
	e.State = journal.StateRemoving
	if err := j.Put(e); err != nil {
		return Blocked, fmt.Sprintf("journal the removal intent: %v; nothing removed", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := rt.Remove(rctx, journalbox.FromEntry(e)); err != nil {
		e.Error = err.Error()
		j.Put(e)
		return Blocked, fmt.Sprintf("remove failed: %v; the journal entry stays open", err)
	}
	sweep(rt, e)
	e.State, e.Error = journal.StateRemoved, ""
	if err := j.Put(e); err != nil {
		return Removed, fmt.Sprintf("labels and nonce match, %s; removed, but closing the entry failed: %v", ownerWhy, err)
	}
	return Removed, "labels and nonce match the journal, " + ownerWhy
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// sweep removes what e's crashed launch left beside its box, where the
// runtime leaves anything (Sweeper).
func sweep(rt supervisor.Runtime, e *journal.Entry) {
	if sw, ok := rt.(Sweeper); ok {
		sw.Sweep(journalbox.FromEntry(e))
	}
}
