package supervisor

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/journal"
)

// findsRuntime is memRuntime registered with IntentFinds; its probe
// answers what probe says, and it records whether the intent was on
// disk when Create ran.
type findsRuntime struct {
	*memRuntime
	probe      func() (Info, error)
	j          *journal.Journal
	intentSeen bool
	rename     string // Prepare names the box this ("": leaves it)
}

func (f *findsRuntime) Prepare(_ context.Context, b *Box) error {
	if f.rename != "" {
		b.Name = f.rename
	}
	return nil
}

func (f *findsRuntime) Name() string                        { return "findsrt" }
func (f *findsRuntime) Probe(context.Context) (Info, error) { return f.probe() }
func (f *findsRuntime) Create(_ context.Context, b *Box) error {
	e, err := f.j.Get(b.LaunchID)
	f.intentSeen = err == nil && e.State == journal.StateIntent && e.Box == b.Name
	return nil
}

var theFinds = &findsRuntime{memRuntime: &memRuntime{boxes: map[string]Listed{}}}

func init() {
	Register(Descriptor{Name: "findsrt", Caps: CapIntentFinds, Bounds: Bounds{Dead: time.Second, Removed: time.Second},
		New: func(RuntimeConfig) (Runtime, error) { return theFinds, nil }})
}

// TestExecIntentBesideProbe: a runtime whose intent finds its boxes has
// its intent written beside the probe; Create runs only once it is on
// disk; a probe that fails leaves no entry (nothing was created).
func TestExecIntentBesideProbe(t *testing.T) {
	run := func() (int, string, []*journal.Entry) {
		dir := t.TempDir()
		var stderr strings.Builder
		theFinds.j, _ = journal.Open(dir, "finds", nil)
		theFinds.intentSeen = false
		code := runExec(&ExecOptions{
			Instance: "finds", JournalDir: dir, Runtime: "findsrt", WatcherPath: "/host/watcher",
			UID: 1000, GID: 1000, Argv: []string{"true"},
		}, &ExecIO{Stdout: io.Discard, Stderr: &stderr, Signals: make(chan os.Signal)})
		es, _, _ := theFinds.j.List()
		return code, stderr.String(), es
	}
	theFinds.probe = func() (Info, error) { return Info{Runtime: "findsrt", Present: true}, nil }
	code, stderr, es := run()
	if code != shared.ExitSetupFailed { // memRuntime cannot start
		t.Errorf("exit %d: %s", code, stderr)
	}
	if !theFinds.intentSeen {
		t.Error("Create ran before the intent was on disk")
	}
	if len(es) != 1 || es[0].State != journal.StateRemoved || es[0].Runtime != "findsrt" {
		t.Errorf("journal after a launch: %+v", es)
	}
	// A Preparer that names the box: the intent Create finds says the
	// name it gave, not the one the intent beside the probe had.
	theFinds.rename = "dw-prepared"
	code, stderr, es = run()
	theFinds.rename = ""
	if !theFinds.intentSeen {
		t.Errorf("Create ran before an intent naming the prepared box was on disk (exit %d: %s)", code, stderr)
	}
	if len(es) != 1 || es[0].Box != "dw-prepared" || es[0].State != journal.StateRemoved {
		t.Errorf("journal after a prepared launch: %+v", es)
	}
	theFinds.probe = func() (Info, error) {
		return Info{Runtime: "findsrt"}, exitcode.Engine("findsrt engine is not reachable")
	}
	code, stderr, es = run()
	if code != shared.ExitEngine || !strings.Contains(stderr, "not reachable") {
		t.Errorf("failed probe: exit %d: %s", code, stderr)
	}
	if len(es) != 0 {
		t.Errorf("a failed probe left journal entries: %+v", es)
	}
}

// daemonFinds is findsRuntime behind a daemon: a rootful one is
// refused unless --allow-rootful.
type daemonFinds struct{ *findsRuntime }

func (d daemonFinds) Name() string { return "findsd" }

func init() {
	Register(Descriptor{Name: "findsd", Daemon: true, Caps: CapIntentFinds, Bounds: Bounds{Dead: time.Second, Removed: time.Second},
		New: func(RuntimeConfig) (Runtime, error) { return daemonFinds{theFinds}, nil }})
}

// TestExecIntentStagedBesideProbe: the intent staged beside the probe
// is no entry while the probe runs; a rootful daemon refused by the
// probe leaves nothing in the journal folder (not even the staged
// file); an accepted one has its intent on disk before Create.
func TestExecIntentStagedBesideProbe(t *testing.T) {
	dir := t.TempDir()
	theFinds.j, _ = journal.Open(dir, "finds", nil)
	entries := func() []string {
		des, _ := os.ReadDir(theFinds.j.Dir())
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		return names
	}
	var during []string
	rootless := false
	theFinds.probe = func() (Info, error) {
		time.Sleep(50 * time.Millisecond) // the staging lands meanwhile
		es, _, _ := theFinds.j.List()
		for _, e := range es {
			during = append(during, e.LaunchID)
		}
		return Info{Runtime: "findsd", Present: true, Rootless: rootless}, nil
	}
	run := func() (int, string) {
		var stderr strings.Builder
		theFinds.intentSeen = false
		code := runExec(&ExecOptions{
			Instance: "finds", JournalDir: dir, Runtime: "findsd", WatcherPath: "/host/watcher",
			UID: 1000, GID: 1000, Argv: []string{"true"},
		}, &ExecIO{Stdout: io.Discard, Stderr: &stderr, Signals: make(chan os.Signal)})
		return code, stderr.String()
	}
	code, stderr := run()
	if code != shared.ExitRefused || !strings.Contains(stderr, "--allow-rootful") {
		t.Errorf("rootful daemon: exit %d: %s", code, stderr)
	}
	if len(during) != 0 {
		t.Errorf("journal entries while the probe ran: %v", during)
	}
	if left := entries(); len(left) != 0 {
		t.Errorf("a refused launch left in the journal folder: %v", left)
	}
	rootless, during = true, nil
	code, stderr = run()
	if code != shared.ExitSetupFailed { // memRuntime cannot start
		t.Errorf("rootless daemon: exit %d: %s", code, stderr)
	}
	if len(during) != 0 {
		t.Errorf("journal entries while the probe ran: %v", during)
	}
	if !theFinds.intentSeen {
		t.Error("Create ran before the intent was on disk")
	}
	if es, _, _ := theFinds.j.List(); len(es) != 1 || es[0].State != journal.StateRemoved {
		t.Errorf("journal after the launch: %+v", es)
	}
}
