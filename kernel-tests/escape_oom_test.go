package kerneltests

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// TestEscapeOOM: an agent that fills its box's memory (its own pages, or
// a tmpfs whose pages no process's RSS shows) under `--memory 64m` is the
// OOM killer's victim, never the watcher, and the exit says so: 137 with
// reason oom, not 245 "liveness lost". Through `supervisor exec
// --runtime native`, end to end.
func TestEscapeOOM(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	for _, c := range []struct{ name, script string }{
		{"allocate", "tail /dev/zero"},
		// The victim is head or the shell (tmpfs pages are no process's):
		// either way the agent ends 137, as a controller's script would
		// pass its command's status on.
		{"fill /dev/shm", "head -c 256m /dev/zero > /dev/shm/fill; s=$?; echo head=$s; exit $s"},
		{"fill /tmp", "head -c 256m /dev/zero > /tmp/fill; s=$?; echo head=$s; exit $s"},
		// An agent may lower its own oom_score_adj from 1000 to 0, the
		// watcher's: its pages and the watcher's would then be weighed
		// alike, and a small head beside a full tmpfs leaves the watcher
		// the largest. The agent's own memory cgroup keeps the watcher
		// out of the fight (exit 4: the agent is not in it; v1 names the
		// memory hierarchy, v2 the unified one).
		{"lower own score, fill /tmp", "grep -qE '(:memory:|^0::)/agent$' /proc/self/cgroup || exit 4; echo 0 > /proc/self/oom_score_adj || exit 3; head -c 256m /dev/zero > /tmp/fill; s=$?; echo head=$s; exit $s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			journal := sharedTempDir(t)
			events := filepath.Join(t.TempDir(), "events.jsonl")
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bins.Supervisor, "exec", "--runtime", "native", "--journal", journal,
				"--watcher", bins.Watcher, "--memory", "64m", "--events", events, "--", "/bin/sh", "-c", c.script)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			reason := exitedReason(t, events)
			t.Logf("exit %d, reason %q: %s", code, reason, strings.TrimSpace(string(out)))
			if code != 137 || reason != string(shared.ReasonOOM) {
				t.Errorf("exit %d reason %q, want 137 reason %q (245 or liveness-lost: the watcher was the victim)", code, reason, shared.ReasonOOM)
			}
		})
	}
}

// exitedReason is the reason of the exited event in a --events file.
func exitedReason(t *testing.T, file string) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev struct{ Event, Reason string }
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == "exited" {
			return ev.Reason
		}
	}
	t.Fatalf("no exited event in %s", file)
	return ""
}
