package supervisor

import (
	"context"
	"deathwatch/supervisor/journal"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/internal/netpolicy"
)

// A Go controller calls Exec directly: it gets the lifecycle's events
// (here a box whose start fails) and the same journal record as the CLI.
func TestExecLibraryEvents(t *testing.T) {
	dir := t.TempDir()
	var got []Event
	var stderr strings.Builder
	code := runExec(&ExecOptions{
		Instance: "lib", JournalDir: dir, Runtime: "memrt", WatcherPath: "/bin/true",
		UID: 1000, GID: 1000, Argv: []string{"true"}, AgentEnv: []string{"TOKEN=secret"},
	}, &ExecIO{Stdout: io.Discard, Stderr: &stderr, Signals: make(chan os.Signal), OnEvent: func(ev Event) { got = append(got, ev) }})
	if code != shared.ExitSetupFailed {
		t.Errorf("exit %d, want %d (%s)", code, shared.ExitSetupFailed, stderr.String())
	}
	var names []string
	for _, ev := range got {
		names = append(names, ev.Event)
		if ev.Runtime != "memrt" || ev.Instance != "lib" || ev.Box == "" || ev.Time.IsZero() {
			t.Errorf("event %+v", ev)
		}
	}
	if strings.Join(names, ",") != "journaled,created,exited,removed" {
		t.Errorf("events %v", names)
	}
	if ex := got[2]; ex.Code == nil || *ex.Code != shared.ExitSetupFailed || ex.Reason != string(shared.ReasonSetupFailed) {
		t.Errorf("exited event %+v", ex)
	}
	j, _ := journal.Open(dir, "lib", nil)
	es, _, _ := j.List()
	if len(es) != 1 || es[0].State != journal.StateRemoved || es[0].Exit == nil || es[0].Exit.Code != shared.ExitSetupFailed {
		t.Fatalf("journal %+v", es)
	}
	b, _ := os.ReadFile(filepath.Join(j.Dir(), es[0].LaunchID+".json"))
	if strings.Contains(string(b), "secret") {
		t.Error("the agent's environment reached the journal")
	}
}

func TestWithDefaults(t *testing.T) {
	for _, tc := range []struct{ in, heartbeat, deadline time.Duration }{
		{0, DefaultHeartbeat, DefaultDeadline},
		{Disabled, 0, 0},
		{time.Minute, time.Minute, time.Minute},
	} {
		o := ExecOptions{Deadline: tc.in, Heartbeat: tc.in}.WithDefaults()
		if o.Heartbeat != tc.heartbeat || o.Deadline != tc.deadline {
			t.Errorf("%v → heartbeat %v deadline %v, want %v %v", tc.in, o.Heartbeat, o.Deadline, tc.heartbeat, tc.deadline)
		}
	}
}

// --network bridge: once the box exists, one warning line says what the
// box reaches of the host; none says nothing.
func TestExecBridgeWarning(t *testing.T) {
	for _, network := range []string{"bridge", "none"} {
		var stderr strings.Builder
		runExec(&ExecOptions{
			Instance: "lib", JournalDir: t.TempDir(), Runtime: "memrt", WatcherPath: "/bin/true", Network: network, NetworkSet: true,
			UID: 1000, GID: 1000, Argv: []string{"true"},
		}, &ExecIO{Stdout: io.Discard, Stderr: &stderr, Signals: make(chan os.Signal)})
		n := strings.Count(stderr.String(), "supervisor: "+netpolicy.BridgeWarning+"\n")
		if want := map[string]int{"bridge": 1, "none": 0}[network]; n != want {
			t.Errorf("--network %s: the bridge warning %d times, want %d:\n%s", network, n, want, stderr.String())
		}
	}
}

// runExec runs Exec as the CLI does: its Say lines and its error go to
// x.Stderr as "supervisor: …" lines; it returns the exit status.
func runExec(o *ExecOptions, x *ExecIO) int {
	o.IO = *x
	o.IO.Say = func(line string) { fmt.Fprintf(x.Stderr, "supervisor: %s\n", line) }
	r, err := Exec(context.Background(), *o)
	if err != nil {
		fmt.Fprintf(x.Stderr, "supervisor: %v\n", err)
		if exitcode.Of(err, -1) != r.Code {
			panic(fmt.Sprintf("Exec's error carries %d, its result %d", exitcode.Of(err, -1), r.Code))
		}
	}
	return r.Code
}
