package supervisor

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"deathwatch/shared"
)

// prepRuntime is memRuntime with the optional hooks: it names its own
// boxes and journals state (Preparer), and its boxes carry no nonce
// label (NonceReader).
type prepRuntime struct {
	*memRuntime
	refuse  error
	nonces  map[string]string // box → the nonce inside it
	created *Box
}

func (p *prepRuntime) Name() string { return "preprt" }

func (p *prepRuntime) Prepare(_ context.Context, b *Box) error {
	if p.refuse != nil {
		return p.refuse
	}
	b.Name = "own-" + b.LaunchID
	b.State["ports"] = "8080"
	b.Links = []shared.Link{{Target: "/workspace", Source: "/src"}}
	return nil
}

func (p *prepRuntime) Create(_ context.Context, b *Box) error {
	p.created = b
	return nil
}

func (p *prepRuntime) ReadNonce(_ context.Context, b *Box) (string, error) {
	n, ok := p.nonces[b.Name]
	if !ok {
		return "", errors.New("exec failed")
	}
	return n, nil
}

var thePrep = &prepRuntime{memRuntime: &memRuntime{boxes: map[string]Listed{}}, nonces: map[string]string{}}

func init() {
	Register(Descriptor{Name: "preprt", Caps: CapHostPorts, ImageWatcher: "/in/image/watcher", Bounds: Bounds{Dead: time.Second, Removed: time.Second},
		New: func(RuntimeConfig) (Runtime, error) { return thePrep, nil }})
}

func TestExecPreparer(t *testing.T) {
	run := func(rt string, ports []int) (int, string, []*JournalEntry) {
		dir := t.TempDir()
		var stderr strings.Builder
		code := Exec(context.Background(), &ExecOptions{
			Instance: "hooks", JournalDir: dir, Runtime: rt, WatcherPath: "/host/watcher", HostPorts: ports,
			UID: 1000, GID: 1000, Argv: []string{"true"},
		}, &ExecIO{Stdout: io.Discard, Stderr: &stderr, Signals: make(chan os.Signal)})
		j, _ := OpenJournal(dir, "hooks")
		es, _, _ := j.List()
		return code, stderr.String(), es
	}

	// The runtime names the box before the intent is journaled, its state
	// is journaled, the image's watcher replaces the host's.
	thePrep.refuse, thePrep.created = nil, nil
	code, stderr, es := run("preprt", []int{8080})
	if code != shared.ExitSetupFailed { // memRuntime cannot start
		t.Errorf("exit %d: %s", code, stderr)
	}
	if len(es) != 1 || es[0].Box != "own-"+es[0].LaunchID || es[0].RuntimeState["ports"] != "8080" {
		t.Fatalf("journal %+v", es)
	}
	if b := thePrep.created; b == nil || b.Name != es[0].Box || b.WatcherInImage != "/in/image/watcher" || b.WatcherPath != "" ||
		len(b.HostPorts) != 1 || len(b.Links) != 1 {
		t.Errorf("created box %+v", thePrep.created)
	}

	// A refusal in Prepare: one line, nothing journaled or created.
	thePrep.refuse, thePrep.created = RefusedError("cannot honour that"), nil
	code, stderr, es = run("preprt", nil)
	if code != shared.ExitRefused || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || len(es) != 0 || thePrep.created != nil {
		t.Errorf("refused: exit %d, stderr %q, journal %+v, created %+v", code, stderr, es, thePrep.created)
	}

	// Host ports on a runtime that cannot honour them are refused.
	code, stderr, es = run("memrt", []int{8080})
	if code != shared.ExitRefused || !strings.Contains(stderr, "--host-port") || len(es) != 0 {
		t.Errorf("memrt --host-port: exit %d, stderr %q, journal %+v", code, stderr, es)
	}
}

func TestReconcileNonceReader(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenJournal(dir, "i")
	if err != nil {
		t.Fatal(err)
	}
	dead := deadOwnerRecord(t)
	thePrep.boxes = map[string]Listed{}
	thePrep.removed = nil
	thePrep.nonces = map[string]string{"own-a": "na", "own-b": "wrong"}
	for _, l := range []string{"a", "b", "c"} {
		if err := j.Put(&JournalEntry{LaunchID: l, Instance: "i", Box: "own-" + l, Runtime: "preprt", Nonce: "n" + l,
			Owner: dead, State: StateStarted, Created: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		lb := labelsFor("i", l, "")
		delete(lb, shared.LabelNonce)
		thePrep.boxes["own-"+l] = Listed{Name: "own-" + l, Labels: lb}
	}
	rep, err := Reconcile(context.Background(), ReconcileOptions{Instance: "i", JournalDir: dir, Runtimes: []string{"preprt"}})
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
