package kerneltests

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// treeScript starts the hard cases of an agent tree, prints "started"
// and waits:
//   - $0-setsid: a setsid'd, double-forked loop (orphaned, its own session);
//   - $0-noterm: a loop that ignores SIGTERM;
//   - the main shell itself.
const treeScript = `
busybox setsid busybox sh -c 'busybox sh -c "while :; do busybox sleep 1; done" "$0-setsid" &' "$0"
busybox sh -c 'trap "" TERM; while :; do busybox sleep 1; done' "$0-noterm" &
echo started
while :; do busybox sleep 1; done
`

// TestWatcherControllerSIGKILL: SIGKILL of the stand-in controller that
// holds the only host end of the stream → every process of the box dies.
func TestWatcherControllerSIGKILL(t *testing.T) {
	bin := watcherBin(t)
	trials := []struct {
		d   domain
		uid uint32
	}{{pid1FD, 1000}, {pid1Stdin, 1234}, {ownNSFD, 1234}, {ownNSStdin, 1000}}
	for _, tr := range trials {
		t.Run(fmt.Sprintf("%s-uid%d", tr.d.name, tr.uid), func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, tr.d.options(true))
			spec := shellSpec(treeScript, marker)
			spec.UID, spec.GID = tr.uid, tr.uid
			spec.Grace = 5 * time.Second // liveness loss must not wait for it
			c.Launch(spec)
			if !c.WaitStdout("started", 5*time.Second) {
				t.Fatalf("the agent did not start\n%s", c.Diagnostics())
			}
			marked := waitMarkers(t, c, 5*time.Second, marker, marker+"-setsid", marker+"-noterm")
			for _, p := range marked {
				if got := uidOf(p); got != strconv.Itoa(int(tr.uid)) {
					t.Errorf("agent process %s runs as uid %s, want %d", ktest.Describe([]ktest.Proc{p}), got, tr.uid)
				}
			}
			ns := c.BoxNamespace(5 * time.Second)
			checkOrphanedSetsid(t, ns, marker)
			box := ktest.InNamespace(ns)
			if len(box) < len(marked)+1 {
				t.Fatalf("box namespace holds %d processes, want at least %d", len(box), len(marked)+1)
			}

			killed := c.KillStandin()
			took := requireDead(t, box, killed, 5*time.Second, "after SIGKILL of the controller")
			gone, left := ktest.WaitGone(box, killed, 5*time.Second)
			t.Logf("SIGKILL of the controller → last of %d box processes dead after %s, reaped after %s",
				len(box), took.Round(10*time.Microsecond), gone.Round(10*time.Microsecond))
			if len(left) > 0 {
				t.Errorf("processes not reaped: %s", ktest.Describe(left))
			}
			res := c.Wait(5 * time.Second)
			// The exit record can reach the test only in stdin mode, where
			// the box→host direction does not pass the dead stand-in.
			expectExit(t, c, res, shared.ExitLivenessLost, shared.ReasonLivenessLost, tr.d.control == ktest.ControlStdin)
			t.Logf("%s", fmtExit(res.Exit))
		})
	}
}

// TestWatcherHeartbeatStall: a frozen controller (SIGSTOP) sends nothing
// while the stream stays open → the box dies after the heartbeat timeout,
// not before.
func TestWatcherHeartbeatStall(t *testing.T) {
	bin := watcherBin(t)
	const heartbeat = time.Second
	const pingEvery = 100 * time.Millisecond
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(true))
			spec := shellSpec(treeScript, marker)
			spec.Heartbeat = heartbeat
			c.Launch(spec)
			c.StartPings(pingEvery)
			if !c.WaitStdout("started", 5*time.Second) {
				t.Fatalf("the agent did not start\n%s", c.Diagnostics())
			}
			marked := waitMarkers(t, c, 5*time.Second, marker, marker+"-setsid", marker+"-noterm")
			ns := c.BoxNamespace(5 * time.Second)
			init, err := ktest.BoxInit(ns)
			if err != nil {
				t.Fatal(err)
			}
			// The loops' sleeps come and go; the shells and the watcher stay.
			steady := append(marked, init)
			box := ktest.InNamespace(ns)

			// Pings keep it alive past the timeout.
			time.Sleep(heartbeat + heartbeat/2)
			requireAlive(t, steady, fmt.Sprintf("with pings every %s and a %s heartbeat", pingEvery, heartbeat))
			if _, ok := c.WaitFrame(shared.FramePong, time.Second); !ok {
				t.Errorf("no pong for the pings\n%s", c.Diagnostics())
			}

			stopped := c.StopStandin()
			time.Sleep(heartbeat * 4 / 10)
			requireAlive(t, steady, fmt.Sprintf("%s after the controller froze (heartbeat %s)", time.Since(stopped).Round(time.Millisecond), heartbeat))
			took := requireDead(t, append(box, steady...), stopped, heartbeat+3*time.Second, "after the heartbeat timeout")
			t.Logf("controller frozen → box dead after %s (heartbeat %s, pings every %s)", took.Round(time.Millisecond), heartbeat, pingEvery)
			// "Not before the heartbeat" counts from the last frame the
			// watcher heard, which the test knows only by its pong: on a
			// busy host the stand-in can stall before the SIGSTOP, so the
			// freeze itself is no reference.
			lastPong := c.LastPong()
			if heard := stopped.Add(took).Sub(lastPong); heard < heartbeat-2*pingEvery-100*time.Millisecond {
				t.Errorf("the box died %s after the last pong the test received (%s after the freeze): before the %s heartbeat could pass", heard, took, heartbeat)
			}
			c.StopPings()
			c.ContStandin()
			res := c.Wait(5 * time.Second)
			expectExit(t, c, res, shared.ExitLivenessLost, shared.ReasonLivenessLost, true)
			t.Logf("%s", fmtExit(res.Exit))
		})
	}
}

// checkOrphanedSetsid makes sure the tree has the shape the test claims:
// the $0-setsid process was reparented to the box's PID 1 and leads a
// session of its own, apart from the agent's.
func checkOrphanedSetsid(t *testing.T, ns, marker string) {
	t.Helper()
	init, err := ktest.BoxInit(ns)
	if err != nil {
		t.Fatal(err)
	}
	main, setsid := ktest.WithMarkerRoots(marker), ktest.WithMarkerRoots(marker+"-setsid")
	if len(main) != 1 || len(setsid) != 1 {
		t.Fatalf("want one agent and one setsid process, found %s and %s", ktest.Describe(main), ktest.Describe(setsid))
	}
	ms, err1 := ktest.ReadStat(main[0].PID)
	ss, err2 := ktest.ReadStat(setsid[0].PID)
	if err1 != nil || err2 != nil {
		t.Fatalf("read stat: %v %v", err1, err2)
	}
	if ss.PPID != init.PID || ss.Session == ms.Session {
		t.Fatalf("the setsid process (ppid %d, session %d) is not an orphan of the box's PID 1 (%d) in a session apart from the agent's (%d)", ss.PPID, ss.Session, init.PID, ms.Session)
	}
}

// TestWatcherHeartbeatNeverPinged: a controller that never sends a frame
// after the spec loses the box once the heartbeat passes.
func TestWatcherHeartbeatNeverPinged(t *testing.T) {
	bin := watcherBin(t)
	const heartbeat = 500 * time.Millisecond
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(false))
			spec := shellSpec(treeScript, marker)
			spec.Heartbeat = heartbeat
			c.Launch(spec)
			readyAt := time.Now()
			res := c.Wait(heartbeat + 5*time.Second)
			took := res.At.Sub(readyAt)
			t.Logf("no frame after the spec: watcher exit %d %s after ready (heartbeat %s); %s", res.Code, took.Round(time.Millisecond), heartbeat, fmtExit(res.Exit))
			expectExit(t, c, res, shared.ExitLivenessLost, shared.ReasonLivenessLost, true)
			if took < heartbeat-100*time.Millisecond {
				t.Errorf("the watcher gave up %s after ready, before the %s heartbeat", took, heartbeat)
			}
		})
	}
}
