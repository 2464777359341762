package supervisor

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"deathwatch/shared"
)

// A Go controller calls Exec directly: it gets the lifecycle's events
// (here a box whose start fails) and the same journal record as the CLI.
func TestExecLibraryEvents(t *testing.T) {
	dir := t.TempDir()
	var got []Event
	var stderr strings.Builder
	code := Exec(context.Background(), &ExecOptions{
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
	j, _ := OpenJournal(dir, "lib")
	es, _, _ := j.List()
	if len(es) != 1 || es[0].State != StateRemoved || es[0].Exit == nil || es[0].Exit.Code != shared.ExitSetupFailed {
		t.Fatalf("journal %+v", es)
	}
	b, _ := os.ReadFile(j.path(es[0].LaunchID))
	if strings.Contains(string(b), "secret") {
		t.Error("the agent's environment reached the journal")
	}
}
