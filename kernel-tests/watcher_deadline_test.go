package kerneltests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// noTermScript: the main shell respects TERM; $0-noterm ignores it (and
// says so), so only the KILL after the grace ends it. It prints
// "noterm-armed" once its trap is set: a TERM before that would kill it.
const noTermScript = `
busybox sh -c 'trap "echo noterm-ignored-TERM" TERM; echo noterm-armed; while :; do busybox sleep 0.1; done' "$0-noterm" &
echo started
while :; do busybox sleep 0.1; done
`

// TestWatcherDeadline: at the deadline every process gets TERM, a
// TERM-ignoring one gets KILL after the grace, and the exit record says
// deadline (246). The deadline runs from the agent's start, between the
// spec's sending and the ready frame: no exit comes before the spec's
// time plus the deadline, and the ready frame's time bounds how late.
func TestWatcherDeadline(t *testing.T) {
	bin := watcherBin(t)
	const deadline, grace = time.Second, time.Second
	for _, d := range twoDomains {
		t.Run(d.name+"/term-ignored", func(t *testing.T) {
			// Long enough that the look half-way comes before it where
			// the agent's first output is slow (an emulated guest).
			const deadline = 3 * time.Second
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(false))
			spec := shellSpec(noTermScript, marker)
			spec.Deadline, spec.Grace = deadline, grace
			specAt := time.Now()
			ready := c.Launch(spec)
			readyAt := time.Now()
			marked := waitMarkers(t, c, 5*time.Second, marker, marker+"-noterm")
			time.Sleep(time.Until(specAt.Add(deadline / 2)))
			if late := time.Since(specAt); late > deadline-200*time.Millisecond {
				t.Fatalf("the agent's processes showed %s after the spec, too late to look at them before the %s deadline", late, deadline)
			}
			requireAlive(t, marked, "half-way to the deadline")

			res := c.Wait(deadline + grace + 5*time.Second)
			requireDead(t, marked, readyAt, ktest.Slack, "after the watcher exited")
			expectExit(t, c, res, shared.ExitDeadline, shared.ReasonDeadline, true)
			took := res.At.Sub(specAt)
			t.Logf("spec → watcher exit %s, ready after %s (deadline %s, grace %s); %s; agent pid %d", took.Round(time.Millisecond), readyAt.Sub(specAt).Round(time.Millisecond), deadline, grace, fmtExit(res.Exit), ready.PID)
			if !strings.Contains(c.Stdout(), "noterm-ignored-TERM") {
				t.Errorf("the TERM-ignoring process never saw TERM; agent stdout: %q", c.Stdout())
			}
			if min := deadline + grace - 200*time.Millisecond; took < min {
				t.Errorf("the watcher exited %s after the spec: a TERM-ignoring process must hold it until deadline+grace (%s)", took, deadline+grace)
			}
		})
		t.Run(d.name+"/term-respected", func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(false))
			spec := shellSpec(`busybox sleep 100 & echo started; busybox sleep 100`, marker)
			spec.Deadline, spec.Grace = deadline, 10*time.Second
			specAt := time.Now()
			c.Launch(spec)
			readyAt := time.Now()
			res := c.Wait(deadline + 15*time.Second)
			expectExit(t, c, res, shared.ExitDeadline, shared.ReasonDeadline, true)
			took := res.At.Sub(readyAt)
			t.Logf("ready → watcher exit %s, ready %s after the spec (deadline %s, grace %s, everything dies at TERM); %s", took.Round(time.Millisecond), readyAt.Sub(specAt).Round(time.Millisecond), deadline, spec.Grace, fmtExit(res.Exit))
			if early := res.At.Sub(specAt); early < deadline-100*time.Millisecond {
				t.Errorf("the watcher exited %s after the spec, before the %s deadline", early, deadline)
			}
			if took > deadline+spec.Grace/2 {
				t.Errorf("the watcher exited %s after ready: it waited for the grace although everything died at TERM", took)
			}
		})
	}
	for _, pid1 := range []bool{true, false} {
		name := "plain-ownns"
		if pid1 {
			name = "plain-pid1"
		}
		t.Run(name, func(t *testing.T) {
			marker := newMarker(t)
			cmd := plainCmd(bin, pid1, []string{"--deadline", deadline.String(), "--grace", grace.String(), "--user", "1000:1000"},
				bbox, "sh", "-c", noTermScript, marker)
			start := time.Now()
			code, out, err := ktest.ExitStatus(cmd, deadline+grace+10*time.Second)
			took := time.Since(start)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			t.Logf("plain --deadline %s --grace %s: exit %d after %s", deadline, grace, code, took.Round(time.Millisecond))
			if code != shared.ExitDeadline {
				t.Errorf("exit status %d, want %d (deadline)\n%s", code, shared.ExitDeadline, out)
			}
			if !strings.Contains(out, "noterm-ignored-TERM") {
				t.Errorf("the TERM-ignoring process never saw TERM; output: %q", out)
			}
			if took < deadline+grace-200*time.Millisecond {
				t.Errorf("exited after %s: before deadline+grace", took)
			}
			if left := ktest.WithMarker(marker + "-noterm"); len(left) > 0 {
				t.Errorf("left behind: %s", ktest.Describe(left))
			}
		})
	}
}

// grandchildScript: setsid'd grandchildren (one ignoring TERM, one
// reporting it) that touch a file in folder $1 once their traps are set,
// then the main process exits 7.
const grandchildScript = `
busybox setsid busybox sh -c '
  busybox sh -c "trap \"\" TERM; busybox touch \$1/noterm; while :; do busybox sleep 0.1; done" "$0-gc-noterm" "$1" &
  busybox sh -c "trap \"echo gc-got-TERM; exit 0\" TERM; busybox touch \$1/term; while :; do busybox sleep 0.1; done" "$0-gc-term" "$1" &
' "$0" "$1"
while [ ! -e "$1/noterm" ] || [ ! -e "$1/term" ]; do busybox sleep 0.02; done
echo started
exit 7
`

// readyDir is a folder the agent (uid 1000) can write its readiness
// files to.
func readyDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	// t.TempDir's parent is 0700: the agent must reach the folder.
	for p := filepath.Dir(dir); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestWatcherMainExitSweep: when the main agent process exits, its
// setsid'd grandchildren are killed (TERM, then KILL after the grace)
// and the watcher exits with the agent's code.
func TestWatcherMainExitSweep(t *testing.T) {
	bin := watcherBin(t)
	const grace = time.Second
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(false))
			spec := shellSpec(grandchildScript, marker)
			spec.Argv = append(spec.Argv, readyDir(t))
			spec.Grace = grace
			c.Launch(spec)
			if !c.WaitStdout("started", 5*time.Second) {
				t.Fatalf("the agent did not start its grandchildren\n%s", c.Diagnostics())
			}
			// The TERM-respecting one may be gone already; the other
			// outlives the TERM by the grace.
			noterm := ktest.WithMarker(marker + "-gc-noterm")
			if len(noterm) == 0 {
				t.Fatalf("the TERM-ignoring grandchild is gone right after the main process exited\n%s", c.Diagnostics())
			}
			gcs := append(noterm, ktest.WithMarker(marker+"-gc-term")...)
			exitAt := time.Now()
			res := c.Wait(grace + 5*time.Second)
			requireDead(t, gcs, exitAt, ktest.Slack, "grandchildren after the watcher exited")
			expectExit(t, c, res, 7, shared.ReasonExited, true)
			t.Logf("main exit → watcher exit %s (grace %s, %d grandchildren); %s", res.At.Sub(exitAt).Round(time.Millisecond), grace, len(gcs), fmtExit(res.Exit))
			if !strings.Contains(c.Stdout(), "gc-got-TERM") {
				t.Errorf("the sweep sent no TERM to the grandchildren (agent stdout %q)", c.Stdout())
			}
		})
	}
	for _, pid1 := range []bool{true, false} {
		name := "plain-ownns"
		if pid1 {
			name = "plain-pid1"
		}
		t.Run(name, func(t *testing.T) {
			marker := newMarker(t)
			cmd := plainCmd(bin, pid1, []string{"--grace", grace.String()}, bbox, "sh", "-c", grandchildScript, marker, readyDir(t))
			start := time.Now()
			code, out, err := ktest.ExitStatus(cmd, grace+10*time.Second)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			t.Logf("plain mode: exit %d after %s", code, time.Since(start).Round(time.Millisecond))
			if code != 7 {
				t.Errorf("exit status %d, want the agent's 7\n%s", code, out)
			}
			if !strings.Contains(out, "gc-got-TERM") {
				t.Errorf("the sweep sent no TERM to the grandchildren (output %q)", out)
			}
			left := append(ktest.WithMarker(marker+"-gc-noterm"), ktest.WithMarker(marker+"-gc-term")...)
			if _, alive := ktest.WaitDead(left, time.Now(), ktest.Slack); len(alive) > 0 {
				t.Errorf("grandchildren left behind: %s", ktest.Describe(alive))
			}
		})
	}
}
