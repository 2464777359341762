package supervisor

import (
	"context"
	"deathwatch/supervisor/journal"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor/exitcode"
)

// prepRuntime is memRuntime with the Preparer hook: it names its own
// boxes and journals state.
type prepRuntime struct {
	*memRuntime
	refuse  error
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

var thePrep = &prepRuntime{memRuntime: &memRuntime{boxes: map[string]Listed{}}}

func init() {
	Register(Descriptor{Name: "preprt", Caps: CapHostPorts, ImageWatcher: "/in/image/watcher", Bounds: Bounds{Dead: time.Second, Removed: time.Second},
		New: func(RuntimeConfig) (Runtime, error) { return thePrep, nil }})
}

func TestExecPreparer(t *testing.T) {
	run := func(rt string, ports []int) (int, string, []*journal.Entry) {
		dir := t.TempDir()
		var stderr strings.Builder
		code := runExec(&ExecOptions{
			Instance: "hooks", JournalDir: dir, Runtime: rt, WatcherPath: "/host/watcher", HostPorts: ports,
			UID: 1000, GID: 1000, Argv: []string{"true"},
		}, &ExecIO{Stdout: io.Discard, Stderr: &stderr, Signals: make(chan os.Signal)})
		j, _ := journal.Open(dir, "hooks", nil)
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
	thePrep.refuse, thePrep.created = exitcode.Refused("cannot honour that"), nil
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
