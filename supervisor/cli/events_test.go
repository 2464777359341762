package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deathwatch/supervisor"
)

// launchesIn is the launch ids of an --events file's lines, in order,
// each line's version checked.
func launchesIn(t *testing.T, p string) []string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev supervisor.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("event line %q: %v", line, err)
		}
		if ev.V != supervisor.EventsVersion {
			t.Errorf("event line %q: v %d, want %d", line, ev.V, supervisor.EventsVersion)
		}
		if len(ids) == 0 || ids[len(ids)-1] != ev.LaunchID {
			ids = append(ids, ev.LaunchID)
		}
	}
	return ids
}

// A reused --events FILE holds the last launch's events alone, unless
// --events-append keeps the earlier ones.
func TestEventsFileTruncates(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{Agent: "exit:0"})
	evf := filepath.Join(t.TempDir(), "events.jsonl")
	launch := func(extra ...string) {
		t.Helper()
		args := append([]string{"--journal", filepath.Join(fe.dir, "journal"), "exec", "--watcher", filepath.Join(fe.bin, "watcher"), "--events", evf}, extra...)
		args = append(append(args, docker...), "--", "agent")
		var out, errb syncBuf
		if code := run(args, &cmdContext{stdout: &out, stderr: &errb, signals: make(chan os.Signal), getenv: os.LookupEnv}); code != 0 {
			t.Fatalf("exec: exit %d; stderr:\n%s", code, errb.String())
		}
	}
	launch()
	launch()
	if ids := launchesIn(t, evf); len(ids) != 1 {
		t.Errorf("after two launches the events file holds launches %v, want the last one alone", ids)
	}
	launch("--events-append")
	if ids := launchesIn(t, evf); len(ids) != 2 {
		t.Errorf("after --events-append the events file holds launches %v, want two", ids)
	}
}
