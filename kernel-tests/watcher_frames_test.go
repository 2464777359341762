package kerneltests

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// TestWatcherControlFrames: pong answers ping with its sequence number,
// the agent's stdout and stderr arrive intact as frames, signal reaches
// the agent's main process, stop ends the box with reason stopped.
func TestWatcherControlFrames(t *testing.T) {
	bin := watcherBin(t)
	for _, d := range twoDomains {
		t.Run(d.name+"/ping-output-signal", func(t *testing.T) {
			const lines = 40000 // about 230 KB: several data frames
			c := ktest.StartController(t, bin, d.options(false))
			c.Launch(shellSpec(`
trap 'echo got-USR1' USR1
echo to-stderr >&2
busybox seq 1 `+"40000"+`
echo started
while :; do busybox sleep 0.05; done`, newMarker(t)))
			if err := c.Send(shared.FramePing, shared.Seq(424242).Marshal()); err != nil {
				t.Fatal(err)
			}
			pong, ok := c.WaitFrame(shared.FramePong, 5*time.Second)
			if !ok {
				t.Fatalf("no pong\n%s", c.Diagnostics())
			}
			if seq, err := shared.ParseSeq(pong.Payload); err != nil || seq != 424242 {
				t.Errorf("pong carries %v (%v), want 424242", seq, err)
			}
			if !c.WaitStdout("started", 10*time.Second) {
				t.Fatalf("the agent did not start\n%s", c.Diagnostics())
			}
			out := c.Stdout()
			if got := strings.Count(out, "\n"); got != lines+1 || !strings.HasPrefix(out, "1\n2\n3\n") || !strings.Contains(out, "\n39999\n40000\nstarted\n") {
				t.Errorf("stdout relayed %d lines (want %d): begins %q, ends %q", got, lines+1, out[:min(20, len(out))], out[max(0, len(out)-30):])
			}
			if c.Stderr() != "to-stderr\n" {
				t.Errorf("stderr relayed %q, want %q", c.Stderr(), "to-stderr\n")
			}
			biggest := c.Data().Largest
			t.Logf("largest stdout frame: %d bytes", biggest)
			if biggest > shared.MaxChunk {
				t.Errorf("a stdout frame of %d bytes exceeds MaxChunk %d", biggest, shared.MaxChunk)
			}

			if err := c.Send(shared.FrameSignal, shared.Signal{Number: int(syscall.SIGUSR1)}.Marshal()); err != nil {
				t.Fatal(err)
			}
			if !c.WaitStdout("got-USR1", 5*time.Second) {
				t.Errorf("the agent did not get the SIGUSR1 sent with a signal frame\n%s", c.Diagnostics())
			}
			if err := c.Send(shared.FrameSignal, shared.Signal{Number: int(syscall.SIGKILL)}.Marshal()); err != nil {
				t.Fatal(err)
			}
			res := c.Wait(10 * time.Second)
			expectExit(t, c, res, shared.SignalStatus(int(syscall.SIGKILL)), shared.ReasonSignaled, true)
			if res.Exit != nil && res.Exit.Signal != int(syscall.SIGKILL) {
				t.Errorf("exit record signal %d, want %d", res.Exit.Signal, syscall.SIGKILL)
			}
			t.Logf("%s", fmtExit(res.Exit))
		})
		t.Run(d.name+"/stop", func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(false))
			spec := shellSpec(noTermScript, marker)
			spec.Grace = 10 * time.Second // the stop frame's grace applies
			c.Launch(spec)
			marked := waitMarkers(t, c, 5*time.Second, marker, marker+"-noterm")
			if !c.WaitStdout("noterm-armed", 5*time.Second) {
				t.Fatalf("the TERM-ignoring process did not set its trap\n%s", c.Diagnostics())
			}
			const grace = 500 * time.Millisecond
			sent := time.Now()
			if err := c.Send(shared.FrameStop, shared.Stop{Grace: grace}.Marshal()); err != nil {
				t.Fatal(err)
			}
			took := requireDead(t, marked, sent, grace+3*time.Second, "after stop")
			res := c.Wait(5 * time.Second)
			t.Logf("stop (grace %s) → box dead after %s; exit %d; %s", grace, took.Round(time.Millisecond), res.Code, fmtExit(res.Exit))
			if res.Exit == nil || res.Exit.Reason != shared.ReasonStopped || res.Exit.Code != res.Code {
				t.Errorf("exit record %s with exit status %d, want reason stopped and the same code", fmtExit(res.Exit), res.Code)
			}
			if !strings.Contains(c.Stdout(), "noterm-ignored-TERM") {
				t.Errorf("stop sent no TERM first (agent stdout %q)", c.Stdout())
			}
			if took < grace-100*time.Millisecond {
				t.Errorf("the TERM-ignoring process died %s after stop, before the %s grace", took, grace)
			}
		})
	}
}
