package kerneltests

// The create window: the supervisor is SIGKILLed while the engine
// client's `create` is in flight. The client is the supervisor's child
// and outlives it, so the box can appear after a reconcile has already
// closed the journal entry ("box gone"). The closed entry still proves
// ownership: the next reconcile removes the late box.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor"
)

// slowCreate is an engine wrapper that marks and delays `create`.
const slowCreate = `#!/bin/sh
if [ "$1" = create ]; then
	: > %[1]q
	sleep 1
fi
exec %[2]q "$@"
`

func TestCrashDuringCreate(t *testing.T) {
	rigs := rigs(t)
	var lines []string
	for _, proto := range rigs {
		if proto.Runtime == "native" {
			continue // native's create runs in the supervisor itself: nothing outlives it
		}
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)
			real := ktest.RequireCmd(t, r.Runtime)
			wrap := filepath.Join(r.Dir, "bin")
			marker := filepath.Join(r.Dir, "creating")
			if err := os.Mkdir(wrap, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(wrap, r.Runtime), []byte(fmt.Sprintf(slowCreate, marker, real)), 0o755); err != nil {
				t.Fatal(err)
			}
			env := []string{"PATH=" + wrap + ":" + os.Getenv("PATH")}

			run := r.start(r.Instance, env, "--", "sh", "-c", cwAgent)
			if !run.waitFor(60*time.Second, func() bool { _, err := os.Stat(marker); return err == nil }) {
				run.kill()
				t.Fatalf("create never started:\n%s", run.stdout())
			}
			ev := run.event(supervisor.EventJournaled)
			if ev == nil {
				run.kill()
				t.Fatal("no journaled event")
			}
			children := ktest.Descendants(run.cmd.Process.Pid)
			run.kill()

			// The box does not exist yet: the entry is closed as gone.
			code, rep, stderr := r.reconcile(r.Instance)
			first := "unreported"
			for _, it := range rep.Closed {
				if it.LaunchID == ev.LaunchID {
					first = "closed"
				}
			}
			for _, it := range rep.Removed {
				if it.LaunchID == ev.LaunchID {
					first = "removed" // the create won the race
				}
			}
			if code != 0 || first == "unreported" {
				t.Fatalf("first reconcile: exit %d, %+v\n%s", code, rep, stderr)
			}
			// The orphaned client finishes its create.
			if _, left := ktest.WaitDead(children, time.Now(), 30*time.Second); len(left) > 0 {
				t.Fatalf("the engine client did not finish: %s", ktest.Describe(left))
			}
			late := r.exists(ev.Box)
			code, rep, stderr = r.reconcile(r.Instance)
			second := "nothing"
			for _, it := range rep.Removed {
				if it.LaunchID == ev.LaunchID {
					second = "removed"
				}
			}
			if code != 0 || len(rep.Blocked) != 0 || (late && second != "removed") {
				t.Errorf("second reconcile (box there: %v): exit %d, %+v\n%s", late, code, rep, stderr)
			}
			if r.exists(ev.Box) || len(r.boxes(r.Instance)) != 0 {
				t.Errorf("box %s left: %v", ev.Box, r.boxes(r.Instance))
			}
			for _, e := range r.entries(r.Instance) {
				if e.Open() {
					t.Errorf("journal entry %s open (%s)", e.LaunchID, e.State)
				}
			}
			l := fmt.Sprintf("%-16s first reconcile: %s; the late box appeared: %v; second reconcile: %s", r.Name, first, late, second)
			t.Log(l)
			lines = append(lines, l)
		})
	}
	t.Logf("SIGKILL while `create` is in flight:\n%s", strings.Join(lines, "\n"))
}
