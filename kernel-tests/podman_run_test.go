package kerneltests

import (
	"deathwatch/supervisor/journal"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"deathwatch/supervisor"
)

// countingEngine is an engine CLI on PATH that notes each call's verb,
// then runs the real one.
const countingEngine = `#!/bin/sh
echo "$1" >> %[1]q
exec %[2]q "$@"
`

// TestPodmanOneProcessPerLaunch: a local podman launch runs one podman
// process, the `podman run` that creates, attaches, starts and (--rm)
// removes the box; its own end proves the removal (podman's private
// storage is never read), and the box is gone as podman's own listing
// says.
func TestPodmanOneProcessPerLaunch(t *testing.T) {
	forLocalPodman(t, func(t *testing.T, r *rig) {
		calls := filepath.Join(r.Dir, "calls")
		env := r.wrapEngine(t, countingEngine, calls)
		t0 := time.Now()
		res := runCmd(r.supervisor(env, "--", "sh", "-c", "echo out; exit 3"))
		b, _ := os.ReadFile(calls)
		verbs := strings.Fields(string(b))
		t.Logf("%s: podman processes of one launch: %q (exit %d, %v)", r.Name, verbs, res.code, res.took)
		if res.code != 3 || res.stdout != "out\n" {
			t.Errorf("exit %d, stdout %q, want 3 and %q; stderr %s", res.code, res.stdout, "out\n", res.stderr)
		}
		if !slices.Equal(verbs, []string{"run"}) {
			t.Errorf("podman processes of one launch: %q, want the run alone", verbs)
		}
		removed := false
		for _, ev := range r.events() {
			if ev.Event == supervisor.EventRemoved {
				removed = ev.Error == ""
			}
		}
		if !removed {
			t.Errorf("no removed event without an error: %+v", r.events())
		}
		if left := r.boxes(r.Instance); len(left) != 0 {
			t.Errorf("boxes left, as podman lists them: %v", left)
		}
		for _, e := range r.entries(r.Instance) {
			if e.State != journal.StateRemoved {
				t.Errorf("journal entry %s: %s, want %s", e.LaunchID, e.State, journal.StateRemoved)
			}
		}
		if entries, err := filepath.Glob(filepath.Join(os.TempDir(), "dw-run-*")); err == nil {
			for _, d := range entries {
				if st, err := os.Stat(d); err == nil && st.ModTime().After(t0) {
					t.Errorf("cidfile folder left: %s", d)
				}
			}
		}
	})
}

// forLocalPodman runs f on rootful and rootless podman, each driven by
// one local `podman run` per launch (no service socket: else it fails).
func forLocalPodman(t *testing.T, f func(t *testing.T, r *rig)) {
	for _, proto := range rigs(t, "podman", "podman-rootless") {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)
			if !r.oneStep() {
				t.Fatalf("%s is not driven by one `podman run` here (a podman service socket?): this test needs local podman", r.Name)
			}
			f(t, &r)
		})
	}
}
