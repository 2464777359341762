package kerneltests

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// TestWatcherSpecApplied: the agent runs in the spec's workdir with the
// spec's environment, and the spec's links exist before it starts.
func TestWatcherSpecApplied(t *testing.T) {
	bin := watcherBin(t)
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			dir := readyDir(t)
			target := filepath.Join(dir, "workspace")
			c := ktest.StartController(t, bin, d.options(false))
			spec := shellSpec(`echo "pwd=$(pwd)"; echo "link=$(busybox readlink "$1")"; busybox ls "$1/" | busybox grep -q '^passwd$' && echo "through=ok"; echo "==env=="; busybox env`, newMarker(t))
			spec.Argv = append(spec.Argv, target)
			spec.Workdir = "/tmp"
			spec.Env = []string{agentPath, "HOME=/home/agent", "WITH_EQUALS=a=b=c", "EMPTY="}
			spec.Links = []shared.Link{{Target: target, Source: "/etc"}}
			c.Launch(spec)
			res := c.Wait(10 * time.Second)
			expectExit(t, c, res, 0, shared.ReasonExited, true)
			out := c.Stdout()
			for _, want := range []string{"pwd=/tmp\n", "link=/etc\n", "through=ok\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("agent output lacks %q:\n%s", want, out)
				}
			}
			_, envText, _ := strings.Cut(out, "==env==\n")
			got := strings.Split(strings.TrimSpace(envText), "\n")
			// busybox sh adds PWD (and may add SHLVL); the rest must be
			// exactly the spec's.
			var extra []string
			have := map[string]bool{}
			for _, kv := range got {
				have[kv] = true
			}
			for _, kv := range spec.Env {
				if !have[kv] {
					t.Errorf("the agent's environment lacks %q: %q", kv, got)
				}
			}
			specSet := map[string]bool{}
			for _, kv := range spec.Env {
				specSet[kv] = true
			}
			for _, kv := range got {
				name, _, _ := strings.Cut(kv, "=")
				if !specSet[kv] && name != "PWD" && name != "SHLVL" && name != "OLDPWD" {
					extra = append(extra, kv)
				}
			}
			sort.Strings(extra)
			if len(extra) > 0 {
				t.Errorf("the agent's environment holds variables the spec did not give: %q", extra)
			}
			if fi, err := os.Lstat(target); err == nil && fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("%s is not a symlink", target)
			}
		})
	}
}

// TestWatcherAgentClosesOutput: an agent that closes its stdout and
// stderr and runs on is still tracked: the watcher exits with its status
// when it exits, not when its output ends.
func TestWatcherAgentClosesOutput(t *testing.T) {
	bin := watcherBin(t)
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			c := ktest.StartController(t, bin, d.options(false))
			c.Launch(shellSpec(`echo bye; exec >&- 2>&-; busybox sleep 0.5; exit 3`, newMarker(t)))
			res := c.Wait(10 * time.Second)
			// Status 3 proves the watcher waited for the agent's exit; the
			// record's runtime (box clock) shows it did not end early.
			expectExit(t, c, res, 3, shared.ReasonExited, true)
			if res.Exit != nil && res.Exit.Runtime < 450*time.Millisecond {
				t.Errorf("exit record runtime %s: the agent sleeps 500ms after closing its output", res.Exit.Runtime)
			}
			if c.Stdout() != "bye\n" {
				t.Errorf("stdout %q, want %q", c.Stdout(), "bye\n")
			}
		})
	}
}

// TestWatcherFloodFrozenController: an agent floods stdout faster than
// the controller reads.
//   - While the controller pings and reads as fast as it can, the box must
//     live: its pings arrive, so there is no liveness loss.
//   - When the controller freezes (SIGSTOP: it neither reads nor sends),
//     the watcher's writes block, yet the heartbeat must still kill the
//     box and the watcher must still exit.
func TestWatcherFloodFrozenController(t *testing.T) {
	bin := watcherBin(t)
	const heartbeat = time.Second
	// fd mode only: there the box→host direction passes the stand-in
	// too, so freezing it stops the reading as well.
	for _, d := range []domain{pid1FD, ownNSFD} {
		t.Run(d.name, func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(true))
			spec := shellSpec(`busybox sh -c 'trap "" TERM; exec busybox yes "$0"' "$0-yes" & echo started; while :; do busybox sleep 1; done`, marker)
			spec.Heartbeat = heartbeat
			c.Launch(spec)
			c.StartPings(100 * time.Millisecond)
			marked := waitMarkers(t, c, 5*time.Second, marker, marker+"-yes")
			box := ktest.InNamespace(c.BoxNamespace(5 * time.Second))

			flood := 2 * heartbeat
			time.Sleep(flood)
			for _, p := range marked {
				if !ktest.Alive(p) {
					t.Fatalf("the box died while the controller pinged every 100ms and read what it could (%d output frames, %d bytes in %s): a slow reader is not a lost controller\n%s",
						c.Data().Frames, c.Data().Bytes, flood, c.Diagnostics())
				}
			}
			t.Logf("controller alive: %d output frames (%d MB) in %s, box alive", c.Data().Frames, c.Data().Bytes>>20, flood)

			stopped := c.StopStandin()
			agents, _ := ktest.WaitDead(marked, stopped, heartbeat+4*time.Second)
			took, alive := ktest.WaitDead(append(box, marked...), stopped, heartbeat+4*time.Second)
			if len(alive) > 0 {
				t.Errorf("frozen controller, flooding agent: %d processes still alive %s after the freeze (heartbeat %s): %s\nwatcher stderr: %s",
					len(alive), took.Round(time.Millisecond), heartbeat, ktest.Describe(alive), c.WatcherOutput())
			} else {
				t.Logf("frozen controller, flooding agent → agent processes dead after %s, the watcher too after %s (heartbeat %s)", agents.Round(time.Millisecond), took.Round(time.Millisecond), heartbeat)
			}
			if !ktest.WaitFor(ktest.Slack, c.Exited) {
				t.Errorf("the watcher is still running with a controller that does not read\n%s", c.WatcherOutput())
			}
			c.StopPings()
			c.ContStandin()
		})
	}
}

// TestWatcherDeadlineUnreadController: the controller's reader is stuck
// (it reads nothing) while its pings go on and the agent floods stdout.
// The watcher's output blocks, but the in-box deadline must still end
// the box: a deadline that waits for the host to read is no deadline.
func TestWatcherDeadlineUnreadController(t *testing.T) {
	bin := watcherBin(t)
	const deadline, grace = time.Second, 500 * time.Millisecond
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(false))
			spec := shellSpec(`busybox sh -c 'trap "" TERM; exec busybox yes "$0"' "$0-yes" & while :; do busybox sleep 1; done`, marker)
			spec.Deadline, spec.Grace = deadline, grace
			c.Launch(spec)
			started := time.Now()
			c.PauseReading()
			c.StartPings(50 * time.Millisecond)
			marked := waitMarkers(t, c, 5*time.Second, marker, marker+"-yes")
			box := ktest.InNamespace(c.BoxNamespace(5 * time.Second))
			agents, _ := ktest.WaitDead(marked, started, deadline+grace+4*time.Second)
			took, alive := ktest.WaitDead(append(box, marked...), started, deadline+grace+4*time.Second)
			c.StopPings()
			c.ResumeReading()
			if len(alive) > 0 {
				t.Fatalf("deadline %s + grace %s with a controller that pings but does not read: %d processes still alive %s after the start: %s\nwatcher stderr: %s",
					deadline, grace, len(alive), took.Round(time.Millisecond), ktest.Describe(alive), c.WatcherOutput())
			}
			t.Logf("unread controller, flooding agent: agent processes dead %s after the start, the watcher too after %s (deadline %s, grace %s)", agents.Round(time.Millisecond), took.Round(time.Millisecond), deadline, grace)
			res := c.Wait(10 * time.Second)
			expectExit(t, c, res, shared.ExitDeadline, shared.ReasonDeadline, false)
		})
	}
}

// TestWatcherHeartbeatUnreadController: the controller's reader gets
// stuck first (the agent floods stdout, nothing is read, the watcher's
// writes block), then the controller stops pinging too, the stream still
// open: a hung controller. The heartbeat must end the box.
func TestWatcherHeartbeatUnreadController(t *testing.T) {
	bin := watcherBin(t)
	const heartbeat = time.Second
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(false))
			spec := shellSpec(`busybox sh -c 'trap "" TERM; exec busybox yes "$0"' "$0-yes" & while :; do busybox sleep 1; done`, marker)
			spec.Heartbeat = heartbeat
			c.Launch(spec)
			c.PauseReading()
			c.StartPings(50 * time.Millisecond)
			marked := waitMarkers(t, c, 5*time.Second, marker, marker+"-yes")
			box := ktest.InNamespace(c.BoxNamespace(5 * time.Second))
			time.Sleep(500 * time.Millisecond)
			c.StopPings()
			hung := time.Now()
			agents, _ := ktest.WaitDead(marked, hung, heartbeat+4*time.Second)
			took, alive := ktest.WaitDead(append(box, marked...), hung, heartbeat+4*time.Second)
			c.ResumeReading()
			if len(alive) > 0 {
				t.Fatalf("heartbeat %s, controller hung (no read, then no ping): %d processes still alive %s later: %s\nwatcher stderr: %s",
					heartbeat, len(alive), took.Round(time.Millisecond), ktest.Describe(alive), c.WatcherOutput())
			}
			t.Logf("hung controller, flooding agent: agent processes dead %s after the last ping, the watcher too after %s (heartbeat %s)", agents.Round(time.Millisecond), took.Round(time.Millisecond), heartbeat)
			res := c.Wait(10 * time.Second)
			expectExit(t, c, res, shared.ExitLivenessLost, shared.ReasonLivenessLost, false)
		})
	}
}
