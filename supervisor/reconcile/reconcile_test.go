package reconcile

import (
	"context"
	"deathwatch/supervisor/journal"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/controller"
	"deathwatch/supervisor/internal/instance"
	"deathwatch/supervisor/proc"
	"deathwatch/supervisor/supervisortest"
)

// memRuntime is an in-memory runtime that lists and removes boxes, all
// reconcile asks of a runtime; readsNonce adds the NonceReader of a
// runtime whose boxes carry no nonce label. The other methods of
// Runtime are never called here (the embedded nil interface).
type memRuntime struct {
	supervisor.Runtime
	name    string
	mu      sync.Mutex
	boxes   map[string]supervisor.Listed
	removed []string
	listErr error
}

func (m *memRuntime) Name() string { return m.name }

func (m *memRuntime) Remove(_ context.Context, b *supervisor.Box) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.boxes, b.Name)
	m.removed = append(m.removed, b.Name)
	return nil
}

func (m *memRuntime) List(_ context.Context, instance string) ([]supervisor.Listed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.listErr != nil {
		return nil, m.listErr
	}
	var out []supervisor.Listed
	for _, b := range m.boxes {
		if b.Labels[shared.LabelInstance] == instance {
			out = append(out, b)
		}
	}
	return out, nil
}

type readsNonce struct {
	*memRuntime
	nonces map[string]string // box → the nonce inside it
}

func (r *readsNonce) ReadNonce(_ context.Context, b *supervisor.Box) (string, error) {
	n, ok := r.nonces[b.Name]
	if !ok {
		return "", errors.New("exec failed")
	}
	return n, nil
}

var (
	theMem  = &memRuntime{name: "memrt", boxes: map[string]supervisor.Listed{}}
	thePrep = &readsNonce{memRuntime: &memRuntime{name: "preprt", boxes: map[string]supervisor.Listed{}}, nonces: map[string]string{}}
)

func init() {
	bounds := supervisor.Bounds{Dead: time.Second, Removed: time.Second}
	supervisor.Register(supervisor.Descriptor{Name: "memrt", Bounds: bounds, New: func(supervisor.RuntimeConfig) (supervisor.Runtime, error) { return theMem, nil }})
	supervisor.Register(supervisor.Descriptor{Name: "preprt", Bounds: bounds, New: func(supervisor.RuntimeConfig) (supervisor.Runtime, error) { return thePrep, nil }})
}

func labelsFor(instance, launch, nonce string) map[string]string {
	return map[string]string{shared.LabelManaged: "true", shared.LabelInstance: instance, shared.LabelLaunchID: launch, shared.LabelNonce: nonce}
}

func TestBoxProof(t *testing.T) {
	e := &journal.Entry{LaunchID: "L1", Instance: "i", Box: "dw-L1", Runtime: "docker", Nonce: "n1"}
	box := supervisor.Listed{Name: "dw-L1", Labels: labelsFor("i", "L1", "n1")}
	with := func(f func(l map[string]string)) supervisor.Listed {
		b := supervisor.Listed{Name: box.Name, Labels: map[string]string{}}
		for k, v := range box.Labels {
			b.Labels[k] = v
		}
		f(b.Labels)
		return b
	}
	for _, tc := range []struct {
		name string
		b    supervisor.Listed
		e    *journal.Entry
		rt   string
		gone bool
		want string // "" = may remove; else a piece of the reason
	}{
		{"proven", box, e, "docker", true, ""},
		{"owner alive", box, e, "docker", false, "alive"},
		{"no entry", box, nil, "docker", true, "no journal entry"},
		{"wrong nonce", with(func(l map[string]string) { l[shared.LabelNonce] = "n2" }), e, "docker", true, "nonce mismatch"},
		{"no nonce", with(func(l map[string]string) { delete(l, shared.LabelNonce) }), e, "docker", true, "no launch id or nonce"},
		{"other instance", with(func(l map[string]string) { l[shared.LabelInstance] = "j" }), e, "docker", true, "instance"},
		{"unmanaged", with(func(l map[string]string) { delete(l, shared.LabelManaged) }), e, "docker", true, "managed"},
		{"other runtime", box, e, "podman", true, "runtime"},
		{"other name", supervisor.Listed{Name: "dw-other", Labels: box.Labels}, e, "docker", true, "names box"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := boxProof("i", tc.rt, tc.b, tc.e, tc.gone, "owner pid 1 is alive")
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("boxProof = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestOwnerProof(t *testing.T) {
	me, err := journal.SelfOwner()
	if err != nil {
		t.Fatal(err)
	}
	if gone, why := me.Proof(); gone {
		t.Errorf("self: gone (%s)", why)
	}
	if gone, _ := supervisortest.DeadOwner(t).Proof(); !gone {
		t.Errorf("dead process: not gone")
	}
	reused := me
	reused.StartTime++
	if gone, why := reused.Proof(); !gone || !strings.Contains(why, "belongs to a process started") {
		t.Errorf("pid reuse: gone=%v %q", gone, why)
	}
	reboot := me
	reboot.BootID = "another-boot"
	if gone, _ := reboot.Proof(); !gone {
		t.Errorf("other boot: not gone")
	}
	if gone, _ := (journal.Owner{}).Proof(); gone {
		t.Errorf("no pid: gone")
	}
}

func TestReconcile(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, "i", nil)
	if err != nil {
		t.Fatal(err)
	}
	me, _ := journal.SelfOwner()
	dead := supervisortest.DeadOwner(t)
	now := time.Now().UTC()
	put := func(launch, nonce, state string, o journal.Owner) {
		if err := j.Put(&journal.Entry{LaunchID: launch, Instance: "i", Box: "dw-" + launch, Runtime: "memrt", Nonce: nonce,
			Labels: labelsFor("i", launch, nonce), Owner: o, State: state, Created: now}); err != nil {
			t.Fatal(err)
		}
	}
	box := func(name, instance, launch, nonce string) {
		theMem.boxes[name] = supervisor.Listed{Name: name, Labels: labelsFor(instance, launch, nonce), Running: true}
	}
	theMem.boxes = map[string]supervisor.Listed{}
	theMem.removed = nil
	put("gone", "n", journal.StateStarted, dead) // box there, owner dead → removed
	box("dw-gone", "i", "gone", "n")
	put("closed", "n", journal.StateCreated, dead) // no box, owner dead → closed
	put("busy", "n", journal.StateStarted, me)     // box there, owner alive → blocked
	box("dw-busy", "i", "busy", "n")
	put("intent", "n", journal.StateIntent, me) // no box yet, owner alive → blocked (in progress)
	put("nonce", "right", journal.StateStarted, dead)
	box("dw-nonce", "i", "nonce", "wrong")       // nonce mismatch → blocked
	box("dw-stray", "i", "stray", "n")           // no entry → blocked
	box("dw-other", "k", "other", "n")           // another instance: not even listed
	put("done", "n", journal.StateRemoved, dead) // closed already: nothing
	// Closed, but its box turned up later (an engine client killed with
	// the supervisor mid-create finishes the create after a reconcile
	// closed the entry): a closed entry still proves ownership.
	put("late", "n", journal.StateRemoved, dead)
	box("dw-late", "i", "late", "n")

	stale := filepath.Join(j.Dir(), ".x.json.tmp-1")
	os.WriteFile(stale, []byte("{"), 0o600)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)

	rep, err := Run(context.Background(), Options{Instance: "i", JournalDir: dir, Runtimes: []string{"memrt"}})
	if err != nil {
		t.Fatal(err)
	}
	ids := func(items []Item) string {
		var s []string
		for _, it := range items {
			s = append(s, it.LaunchID)
		}
		return strings.Join(s, ",")
	}
	sort.Slice(rep.Removed, func(a, b int) bool { return rep.Removed[a].LaunchID < rep.Removed[b].LaunchID })
	if got := ids(rep.Removed); got != "gone,late" {
		t.Errorf("removed %q, want gone,late", got)
	}
	if got := ids(rep.Closed); got != "closed" {
		t.Errorf("closed %q, want closed", got)
	}
	blocked := map[string]bool{}
	for _, it := range rep.Blocked {
		blocked[it.LaunchID] = true
		if it.Reason == "" {
			t.Errorf("blocked %s without a reason", it.LaunchID)
		}
	}
	for _, want := range []string{"busy", "intent", "nonce", "stray"} {
		if !blocked[want] {
			t.Errorf("%s not blocked: %+v", want, rep.Blocked)
		}
	}
	if len(rep.Blocked) != 4 || rep.ExitCode() != shared.ExitBlocked {
		t.Errorf("blocked %+v, exit %d", rep.Blocked, rep.ExitCode())
	}
	sort.Strings(theMem.removed)
	if strings.Join(theMem.removed, ",") != "dw-gone,dw-late" {
		t.Errorf("runtime removed %v, want only dw-gone and dw-late", theMem.removed)
	}
	for _, want := range []struct{ id, state string }{{"gone", journal.StateRemoved}, {"closed", journal.StateRemoved}, {"busy", journal.StateStarted}, {"nonce", journal.StateStarted}, {"intent", journal.StateIntent}} {
		e, err := j.Get(want.id)
		if err != nil || e.State != want.state {
			t.Errorf("entry %s: %v state %v, want %s", want.id, err, e, want.state)
		}
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("stale temp file not pruned")
	}

	// Idempotent.
	rep2, err := Run(context.Background(), Options{Instance: "i", JournalDir: dir, Runtimes: []string{"memrt"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep2.Removed)+len(rep2.Closed) != 0 || len(rep2.Blocked) != 4 {
		t.Errorf("second run: %+v", rep2)
	}

	// An entry of a runtime this supervisor does not know: blocked.
	if err := j.Put(&journal.Entry{LaunchID: "alien", Instance: "i", Box: "dw-alien", Runtime: "sbx", Nonce: "n",
		Owner: dead, State: journal.StateStarted, Created: now}); err != nil {
		t.Fatal(err)
	}
	repA, _ := Run(context.Background(), Options{Instance: "i", JournalDir: dir, Runtimes: []string{"memrt"}})
	alien := false
	for _, it := range repA.Blocked {
		alien = alien || it.LaunchID == "alien" && strings.Contains(it.Reason, "not a runtime")
	}
	if !alien || len(repA.Closed) != 0 {
		t.Errorf("unknown runtime: %+v", repA)
	}
	os.Remove(filepath.Join(j.Dir(), "alien.json"))

	// A runtime that cannot list: its open entries are blocked, never closed.
	theMem.listErr = errors.New("engine down")
	defer func() { theMem.listErr = nil }()
	put("unseen", "n", journal.StateStarted, dead)
	rep3, _ := Run(context.Background(), Options{Instance: "i", JournalDir: dir, Runtimes: []string{"memrt"}})
	found := false
	for _, it := range rep3.Blocked {
		if it.LaunchID == "unseen" && strings.Contains(it.Reason, "engine down") {
			found = true
		}
	}
	if !found || len(rep3.Closed) != 0 {
		t.Errorf("unlistable runtime: %+v", rep3)
	}
}

// TestReconcileProbes: a box of the instance's probes (doctor's and
// exec's staging probe, prove-deathwatch's trials) whose supervisor was
// killed is the instance's leftover: reconcile of the instance removes
// it and says whose it was; another instance's probe is not touched.
func TestReconcileProbes(t *testing.T) {
	dir := t.TempDir()
	dead := supervisortest.DeadOwner(t)
	theMem.boxes = map[string]supervisor.Listed{}
	theMem.removed = nil
	for _, inst := range []string{instance.Probe("i"), instance.Prove("i"), instance.Probe("k")} {
		j, err := journal.Open(dir, inst, nil)
		if err != nil {
			t.Fatal(err)
		}
		launch := strings.ReplaceAll(inst, ".", "-")
		if err := j.Put(&journal.Entry{LaunchID: launch, Instance: inst, Box: "dw-" + launch, Runtime: "memrt", Nonce: "n",
			Labels: labelsFor(inst, launch, "n"), Owner: dead, State: journal.StateStarted, Created: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		theMem.boxes["dw-"+launch] = supervisor.Listed{Name: "dw-" + launch, Labels: labelsFor(inst, launch, "n")}
	}
	rep, err := Run(context.Background(), Options{Instance: "i", JournalDir: dir, Runtimes: []string{"memrt"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, it := range rep.Removed {
		got[it.Box] = it.Instance
	}
	if len(rep.Removed) != 2 || got["dw-i-doctor"] != "i.doctor" || got["dw-i-prove"] != "i.prove" || len(rep.Blocked)+len(rep.Closed) != 0 {
		t.Errorf("removed %+v, closed %+v, blocked %+v; want i's two probes' boxes, each with its instance", rep.Removed, rep.Closed, rep.Blocked)
	}
	if _, there := theMem.boxes["dw-k-doctor"]; !there {
		t.Errorf("another instance's probe box was removed")
	}
	// An instance whose probes never ran: reconcile makes no folder for them.
	if _, err := Run(context.Background(), Options{Instance: "z", JournalDir: dir, Runtimes: []string{"memrt"}}); err != nil {
		t.Fatal(err)
	}
	for _, inst := range []string{instance.Probe("z"), instance.Prove("z")} {
		if _, err := os.Stat(filepath.Join(dir, inst)); err == nil {
			t.Errorf("reconcile made the journal folder of %s", inst)
		}
	}
}

// TestReconcileLostEntry: an entry a power loss emptied (one whose
// data was not synced yet: a Volatile runtime's, an intent before its
// fsyncs returned, a closing write; see Journal.Put) is closed and its file
// removed; an empty entry written in this boot, or one with anything
// but NULs in it, still blocks (no power loss explains it).
func TestReconcileLostEntry(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, "i", nil)
	if err != nil {
		t.Fatal(err)
	}
	theMem.boxes = map[string]supervisor.Listed{}
	theMem.removed = nil
	before := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC) // before this boot
	for name, f := range map[string]struct {
		data []byte
		at   time.Time
	}{
		"empty": {nil, before}, "nuls": {make([]byte, 300), before},
		"fresh": {nil, time.Now()}, "junk": {[]byte("{\x00"), before},
	} {
		p := filepath.Join(j.Dir(), name+".json")
		if err := os.WriteFile(p, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, f.at, f.at); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Run(context.Background(), Options{Instance: "i", JournalDir: dir, Runtimes: []string{"memrt"}})
	if err != nil {
		t.Fatal(err)
	}
	closed := map[string]bool{}
	for _, it := range rep.Closed {
		closed[it.LaunchID] = true
	}
	if len(rep.Closed) != 2 || !closed["empty"] || !closed["nuls"] {
		t.Errorf("closed %+v, want the empty and the NUL-filled entries written before this boot", rep.Closed)
	}
	if len(rep.Blocked) != 2 || rep.ExitCode() != shared.ExitBlocked {
		t.Errorf("blocked %+v, want the entry emptied in this boot and the one holding a byte", rep.Blocked)
	}
	for name, want := range map[string]bool{"empty": false, "nuls": false, "fresh": true, "junk": true} {
		if _, err := os.Stat(filepath.Join(j.Dir(), name+".json")); (err == nil) != want {
			t.Errorf("%s.json there: %v, want %v", name, err == nil, want)
		}
	}
	if len(theMem.removed) != 0 {
		t.Errorf("runtime asked to remove %v", theMem.removed)
	}
}

func TestOwnerProofOtherPIDNamespace(t *testing.T) {
	me, err := journal.SelfOwner()
	if err != nil {
		t.Fatal(err)
	}
	if me.PIDNS == 0 {
		t.Fatal("SelfOwner recorded no PID namespace")
	}
	elsewhere := me
	elsewhere.PIDNS++
	elsewhere.PID = 1 << 22 // dead here, but that proves nothing about another namespace
	if gone, why := elsewhere.Proof(); gone || !strings.Contains(why, "another PID namespace") {
		t.Errorf("owner in another PID namespace: gone=%v (%s), want not provable", gone, why)
	}
}

func TestOwnerState(t *testing.T) {
	ctrl := &journal.ControllerRecord{Link: controller.LinkDetached, Owner: journal.Owner{PID: 42, StartTime: 7}}
	unknown := &journal.ControllerRecord{Link: controller.LinkFD}
	for _, c := range []struct {
		name                string
		ownerGone, ctrlGone bool
		ctrl                *journal.ControllerRecord
		want                string
	}{
		{"owner gone", true, true, ctrl, OwnerGone},
		{"owner gone, no controller journaled", true, false, nil, OwnerGone},
		{"owner and controller alive", false, false, ctrl, OwnerAlive},
		{"owner alive, controller gone: an orphan", false, true, ctrl, OwnerOrphan},
		{"owner alive, no controller journaled (a library caller)", false, true, nil, OwnerAlive},
		{"owner alive, the controller a descriptor's other end", false, true, unknown, OwnerAlive},
	} {
		if got := ownerState(c.ownerGone, c.ctrl, c.ctrlGone); got != c.want {
			t.Errorf("%s: ownerState = %s, want %s", c.name, got, c.want)
		}
	}
}

// sleeper is a running process as an journal.Owner record (a stand-in
// supervisor that dies of SIGTERM).
func sleeper(t *testing.T) (journal.Owner, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	st, err := proc.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return journal.Owner{PID: cmd.Process.Pid, StartTime: st, BootID: proc.BootID()}, cmd
}

// TestReconcileOrphan: an owner alive whose journaled controller is dead
// is ended and its box removed; one whose controller lives is left
// alone, and so is its box.
func TestReconcileOrphan(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, "o", nil)
	if err != nil {
		t.Fatal(err)
	}
	me, _ := journal.SelfOwner()
	dead := supervisortest.DeadOwner(t)
	orphan, orphanCmd := sleeper(t)
	kept, _ := sleeper(t)
	exited := make(chan struct{})
	go func() { orphanCmd.Wait(); close(exited) }()
	theMem.boxes = map[string]supervisor.Listed{}
	theMem.removed = nil
	for _, c := range []struct {
		launch string
		owner  journal.Owner
		ctrl   journal.Owner
	}{{"orphan", orphan, dead}, {"kept", kept, me}} {
		if err := j.Put(&journal.Entry{LaunchID: c.launch, Instance: "o", Box: "dw-" + c.launch, Runtime: "memrt", Nonce: "n",
			Labels: labelsFor("o", c.launch, "n"), Owner: c.owner, Controller: &journal.ControllerRecord{Link: controller.LinkDetached, Owner: c.ctrl},
			State: journal.StateStarted, Created: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		theMem.boxes["dw-"+c.launch] = supervisor.Listed{Name: "dw-" + c.launch, Labels: labelsFor("o", c.launch, "n"), Running: true}
	}
	rep, err := Run(context.Background(), Options{Instance: "o", JournalDir: dir, Runtimes: []string{"memrt"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the orphan owner was not ended")
	}
	if len(rep.Removed) != 1 || rep.Removed[0].LaunchID != "orphan" || rep.Removed[0].Owner != OwnerOrphan || !strings.Contains(rep.Removed[0].Reason, "orphan") {
		t.Errorf("removed %+v, want the orphan's box, owner orphan", rep.Removed)
	}
	if len(rep.Blocked) != 1 || rep.Blocked[0].LaunchID != "kept" || rep.Blocked[0].Owner != OwnerAlive {
		t.Errorf("blocked %+v, want the live controller's box, owner alive", rep.Blocked)
	}
	if strings.Join(theMem.removed, ",") != "dw-orphan" {
		t.Errorf("runtime removed %v, want dw-orphan alone", theMem.removed)
	}
	if !(journal.Owner{PID: kept.PID, StartTime: kept.StartTime, BootID: kept.BootID}).Alive() {
		t.Error("the owner whose controller lives was ended")
	}
}

func TestReconcileNonceReader(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, "i", nil)
	if err != nil {
		t.Fatal(err)
	}
	dead := supervisortest.DeadOwner(t)
	thePrep.boxes = map[string]supervisor.Listed{}
	thePrep.removed = nil
	thePrep.nonces = map[string]string{"own-a": "na", "own-b": "wrong"}
	for _, l := range []string{"a", "b", "c"} {
		if err := j.Put(&journal.Entry{LaunchID: l, Instance: "i", Box: "own-" + l, Runtime: "preprt", Nonce: "n" + l,
			Owner: dead, State: journal.StateStarted, Created: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		lb := labelsFor("i", l, "")
		delete(lb, shared.LabelNonce)
		thePrep.boxes["own-"+l] = supervisor.Listed{Name: "own-" + l, Labels: lb}
	}
	rep, err := Run(context.Background(), Options{Instance: "i", JournalDir: dir, Runtimes: []string{"preprt"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) != 1 || rep.Removed[0].Box != "own-a" {
		t.Errorf("removed %+v", rep.Removed)
	}
	why := map[string]string{}
	for _, it := range rep.Blocked {
		why[it.Box] = it.Reason
	}
	if !strings.Contains(why["own-b"], "nonce mismatch") || !strings.Contains(why["own-c"], "cannot read the nonce") || len(rep.Closed) != 0 {
		t.Errorf("blocked %+v, closed %+v", rep.Blocked, rep.Closed)
	}
}

// --prune removes the closed entries older than its age, the
// instance's and its probes', and counts them; open entries stay.
func TestReconcilePrune(t *testing.T) {
	dir := t.TempDir()
	theMem.boxes = map[string]supervisor.Listed{}
	me, _ := journal.SelfOwner()
	long := time.Now().Add(-2 * time.Hour)
	for _, instance := range []string{"p", instance.Probe("p")} {
		j, err := journal.Open(dir, instance, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"old", "young", "open"} {
			state := journal.StateRemoved
			if id == "open" {
				state = journal.StateStarted
				theMem.boxes["dw-"+instance] = supervisor.Listed{Name: "dw-" + instance, Labels: labelsFor(instance, id, "n"), Running: true}
			}
			if err := j.Put(&journal.Entry{LaunchID: id, Instance: instance, Box: "dw-" + instance, Runtime: "memrt", Nonce: "n",
				Labels: labelsFor(instance, id, "n"), Owner: me, State: state, Created: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		os.Chtimes(filepath.Join(j.Dir(), "closed", "old.json"), long, long)
	}
	rep, err := Run(context.Background(), Options{Instance: "p", JournalDir: dir, Runtimes: []string{"memrt"}, Prune: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pruned != 2 {
		t.Errorf("pruned %d, want 2 (the instance's old entry and its probe's)", rep.Pruned)
	}
	for _, instance := range []string{"p", instance.Probe("p")} {
		j, _ := journal.Open(dir, instance, nil)
		es, _, _ := j.List()
		var ids []string
		for _, e := range es {
			ids = append(ids, e.LaunchID)
		}
		sort.Strings(ids)
		if strings.Join(ids, ",") != "open,young" {
			t.Errorf("%s after --prune: %v, want open,young", instance, ids)
		}
	}
}
