package kerneltests

import (
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor/hostcheck"
)

// proveRun runs `supervisor prove-deathwatch --json ARGS` as the rig's
// user and returns its exit status and report.
func (r *rig) prove(args ...string) (int, hostcheck.ProveReport, string) {
	r.T.Helper()
	argv := []string{"--instance", r.Instance, "--journal", r.JournalDir(), "prove-deathwatch", "--json", "--runtime", r.Runtime}
	if r.Image != "" {
		argv = append(argv, "--image", r.Image)
	}
	if r.User == "" && r.Runtime != "native" {
		argv = append(argv, "--allow-rootful")
	}
	return supervisorJSON[hostcheck.ProveReport](r, append(argv, args...)...)
}

// noProveLeftovers: nothing of the stand-ins is left, no box and no
// open journal entry.
func (r *rig) noProveLeftovers(t *testing.T) {
	t.Helper()
	if b := r.boxes(r.Instance + ".prove"); len(b) != 0 {
		t.Errorf("boxes left: %v", b)
	}
	for _, e := range r.entries(r.Instance + ".prove") {
		if e.Open() {
			t.Errorf("journal entry %s open (%s)", e.LaunchID, e.State)
		}
	}
}

func proveTable(rep hostcheck.ProveReport) string {
	var b strings.Builder
	hostcheck.WriteProveTable(&b, &rep)
	return b.String()
}

// prove-deathwatch on every runtime, 10 trials per path: every box
// process dies and every box is removed within a generous ceiling, and
// afterwards nothing of the stand-ins is left (no box, no open journal
// entry). The ceilings are ktest.Slack on top of what each path waits
// for on purpose, not the runtime's default bounds: those are the
// tight figures a user checks on an idle host (make bench prints them),
// and a busy 2-core CI machine must not fail on them.
func TestProveDeathwatch(t *testing.T) {
	for _, proto := range rigs(t) {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)
			t0 := time.Now()
			code, rep, stderr := r.prove("--trials", "10", "--bound", ktest.Slack.String(), "--remove-bound", (3 * ktest.Slack).String())
			t.Logf("%s (%v):\n%s", r.Name, time.Since(t0).Round(time.Second), proveTable(rep))
			if code != 0 || !rep.Pass {
				t.Errorf("exit %d, pass %v\n%s", code, rep.Pass, stderr)
			}
			if len(rep.Rows) != 8 {
				t.Errorf("%d rows, want 8 (4 paths × dead/removed)", len(rep.Rows))
			}
			for _, row := range rep.Rows {
				if row.N != 10 || row.Max > row.Bound || row.P50 > row.P95 || row.P95 > row.Max {
					t.Errorf("row %+v", row)
				}
			}
			r.noProveLeftovers(t)
		})
	}
}

// A bound nothing can meet fails the proof with exit 243 (--strict: no
// allowance for the host's own wake-up delay), and a missing
// image is the stand-in's own status (242), both with a report.
func TestProveDeathwatchFails(t *testing.T) {
	rigs := rigs(t)
	r := *rigs[0] // docker
	r.setup(t)
	code, rep, _ := r.prove("--trials", "1", "--path", "sigkill", "--bound", "1ns", "--strict")
	if code != shared.ExitRefused || rep.Pass {
		t.Errorf("impossible bound: exit %d, pass %v\n%s", code, rep.Pass, proveTable(rep))
	}
	if len(rep.Rows) == 0 || len(rep.Rows[0].Failures) == 0 || !strings.Contains(rep.Rows[0].Failures[0], "exceeds the bound") {
		t.Errorf("impossible bound: no failure named: %+v", rep.Rows)
	}
	r.Image = "deathwatch-test:no-such-image"
	code, rep, stderr := r.prove("--trials", "1", "--path", "sigkill")
	if code != shared.ExitImage || rep.Pass || rep.Error == "" {
		t.Errorf("missing image: exit %d, report %+v\n%s", code, rep, stderr)
	}
	if b := r.boxes(r.Instance + ".prove"); len(b) != 0 {
		t.Errorf("boxes left: %v", b)
	}
}

// A deadline shorter than the host takes to show a box's processes (a
// rootful podman box is listed through a `podman inspect` process):
// the box ends before the prover sees it, which proves nothing either
// way. prove-deathwatch raises the deadline, says so in a note, and
// proves the path with the raised one; nothing is left behind. (Seen
// under load with doctor's 1 s deadline; 10 ms makes it certain.)
func TestProveDeathwatchDeadlineUnseen(t *testing.T) {
	var r rig
	for _, p := range rigs(t) {
		if p.Name == "podman" {
			r = *p
		}
	}
	if r.Name == "" {
		t.Fatal("no rootful podman rig")
	}
	r.setup(t)
	code, rep, stderr := r.prove("--trials", "2", "--path", "deadline", "--deadline", "10ms", "--grace", "10ms",
		"--bound", ktest.Slack.String(), "--remove-bound", (3 * ktest.Slack).String())
	t.Logf("\n%s", proveTable(rep))
	if code != 0 || !rep.Pass {
		t.Errorf("exit %d, pass %v\n%s", code, rep.Pass, stderr)
	}
	if len(rep.Notes) == 0 || !strings.Contains(rep.Notes[0], "deadline was raised") {
		t.Errorf("no note of the raised deadline: %q", rep.Notes)
	}
	for _, row := range rep.Rows {
		if row.N != 2 || strings.HasPrefix(row.BoundStr, "10ms+") {
			t.Errorf("row %+v: want 2 trials under the raised deadline", row)
		}
	}
	r.noProveLeftovers(t)
}
