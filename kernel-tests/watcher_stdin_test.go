package kerneltests

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// stdinSpec is shellSpec with a stdin relay.
func stdinSpec(script, marker string) shared.Spec {
	s := shellSpec(script, marker)
	s.Stdin = true
	return s
}

// echoLoop answers every line with "re:" and the line.
const echoLoop = `while read -r l; do echo "re:$l"; done; echo "loop-ended"`

// TestWatcherStdinEcho: a line-based echo agent gets 10,000 requests
// through stdin frames and answers each in order; round trips one at a
// time are timed; stdin-eof then ends the agent normally (exit 0) while
// the box stays watched until it does.
func TestWatcherStdinEcho(t *testing.T) {
	bin := watcherBin(t)
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			c := ktest.StartController(t, bin, d.options(false))
			c.Launch(stdinSpec(echoLoop, newMarker(t)))

			// Lock step: one request, its answer, the next.
			const trips = 300
			lat := make([]time.Duration, 0, trips)
			for i := 0; i < trips; i++ {
				at := time.Now()
				if err := c.SendStdin([]byte("ping-" + strconv.Itoa(i) + "\n")); err != nil {
					t.Fatal(err)
				}
				if !c.WaitStdout("re:ping-"+strconv.Itoa(i)+"\n", 10*time.Second) {
					t.Fatalf("no answer to request %d\n%s", i, c.Diagnostics())
				}
				lat = append(lat, time.Since(at))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			t.Logf("duplex echo round trip over %d requests: p50 %s, p99 %s, max %s", trips,
				lat[trips/2].Round(time.Microsecond), lat[trips*99/100].Round(time.Microsecond), lat[trips-1].Round(time.Microsecond))

			// 10,000 requests pipelined, answered in order.
			const n = 10000
			var req, want strings.Builder
			for i := 0; i < n; i++ {
				fmt.Fprintf(&req, "req-%d\n", i)
				fmt.Fprintf(&want, "re:req-%d\n", i)
			}
			before := len(c.Stdout())
			start := time.Now()
			sendErr := make(chan error, 1)
			go func() { sendErr <- c.SendStdin([]byte(req.String())) }()
			if !ktest.WaitFor(60*time.Second, func() bool { return len(c.Stdout())-before >= want.Len() || c.Exited() }) {
				t.Fatalf("%d of %d answer bytes after 60s\n%s", len(c.Stdout())-before, want.Len(), c.Diagnostics())
			}
			if err := <-sendErr; err != nil {
				t.Fatal(err)
			}
			if got := c.Stdout()[before:]; got != want.String() {
				t.Fatalf("the %d answers are not the requests in order: got %d bytes, first difference at %d", n, len(got), firstDiff(got, want.String()))
			}
			t.Logf("%d pipelined requests (%d bytes) answered in order in %s; %d stdin-credit frames", n, req.Len(), time.Since(start).Round(time.Millisecond), c.Credits())

			// The box stays up, watched, until the input ends.
			time.Sleep(200 * time.Millisecond)
			if c.Exited() {
				t.Fatalf("the watcher exited before stdin-eof\n%s", c.Diagnostics())
			}
			endInput(t, c)
			if !strings.HasSuffix(c.Stdout(), "loop-ended\n") {
				t.Errorf("the agent did not see the end of its input\n%s", c.Diagnostics())
			}
		})
	}
}

// TestWatcherStdinEOF: cat ends normally at stdin-eof, not before, and
// the box is watched all along: a host that never sends stdin-eof and
// dies still takes the box with it.
func TestWatcherStdinEOF(t *testing.T) {
	bin := watcherBin(t)
	for _, d := range twoDomains {
		t.Run(d.name+"/cat", func(t *testing.T) {
			c := ktest.StartController(t, bin, d.options(false))
			spec := stdinSpec("", "")
			spec.Argv = []string{bbox, "cat"}
			c.Launch(spec)
			echoOnce(t, c, "hello, cat\n")
			time.Sleep(300 * time.Millisecond)
			if c.Exited() {
				t.Fatalf("cat ended before stdin-eof\n%s", c.Diagnostics())
			}
			endInput(t, c)
		})
		t.Run(d.name+"/host-dies", func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(true))
			spec := stdinSpec(`busybox cat; echo cat-ended`, marker)
			spec.Grace = 10 * time.Second
			c.Launch(spec)
			echoOnce(t, c, "before the host dies\n")
			box := waitMarkers(t, c, ktest.Slack, marker)
			killed := c.KillStandin()
			took := requireDead(t, box, killed, 3*time.Second, "after the host died without stdin-eof")
			res := c.Wait(10 * time.Second)
			t.Logf("host SIGKILLed with the agent's stdin open → box dead after %s; %s", took.Round(10*time.Microsecond), fmtExit(res.Exit))
			if res.Code != shared.ExitLivenessLost {
				t.Errorf("watcher exit status %d, want %d (liveness lost)\n%s", res.Code, shared.ExitLivenessLost, c.Diagnostics())
			}
			if strings.Contains(c.Stdout(), "cat-ended") {
				t.Errorf("cat saw the end of its input: the host's death must kill it, not close its stdin")
			}
		})
	}
}

// echoOnce sends line as input and waits for the agent to echo it.
func echoOnce(t *testing.T, c *ktest.Controller, line string) {
	t.Helper()
	if err := c.SendStdin([]byte(line)); err != nil {
		t.Fatal(err)
	}
	if !c.WaitStdout(line, ktest.Slack) {
		t.Fatalf("the agent did not echo %q\n%s", line, c.Diagnostics())
	}
}

// endInput sends stdin-eof and expects the agent to end with 0.
func endInput(t *testing.T, c *ktest.Controller) {
	t.Helper()
	if err := c.SendStdinEOF(); err != nil {
		t.Fatal(err)
	}
	res := c.Wait(10 * time.Second)
	expectExit(t, c, res, 0, shared.ReasonExited, true)
}

// TestWatcherStdinBounded: a host that has more input than a sleeping
// agent reads waits for credit; the watcher holds at most the window,
// its memory stays bounded, pings keep the box alive meanwhile, and all
// of the input arrives once the agent reads. A host that ignores the
// credit is a protocol error: the box dies.
func TestWatcherStdinBounded(t *testing.T) {
	bin := watcherBin(t)
	const total = 200 << 20
	const maxHWM = 32 << 10 // KiB
	for _, d := range twoDomains {
		t.Run(d.name+"/credit", func(t *testing.T) {
			c := ktest.StartController(t, bin, d.options(false))
			spec := stdinSpec(`echo sleeping; busybox sleep 3; busybox wc -c`, newMarker(t))
			spec.Heartbeat = 2 * time.Second // shorter than the stall: pings keep the box
			c.Launch(spec)
			c.StartPings(100 * time.Millisecond)
			init, err := ktest.BoxInit(c.BoxNamespace(ktest.Slack))
			if err != nil {
				t.Fatal(err)
			}

			var sent atomic.Int64
			sendErr := make(chan error, 1)
			go func() {
				chunk := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
				for sent.Load() < total {
					if err := c.SendStdin(chunk); err != nil {
						sendErr <- err
						return
					}
					sent.Add(int64(len(chunk)))
				}
				sendErr <- c.SendStdinEOF()
			}()
			time.Sleep(1500 * time.Millisecond) // the agent sleeps
			if n := sent.Load(); n > 1<<20 || c.Stdin.Avail() > shared.MaxChunk {
				t.Errorf("while the agent sleeps the host sent %d bytes and holds %d of credit: want it stalled after the window (%d) and the pipe", n, c.Stdin.Avail(), shared.StdinWindowSize)
			}
			if err := <-sendErr; err != nil {
				t.Fatalf("send the input: %v\n%s", err, c.Diagnostics())
			}
			hwm := vmHWM(t, init.PID)
			res := c.Wait(60 * time.Second)
			expectExit(t, c, res, 0, shared.ReasonExited, true)
			if got := strings.TrimSpace(strings.TrimPrefix(c.Stdout(), "sleeping\n")); got != strconv.Itoa(total) {
				t.Errorf("the agent counted %q bytes of input, want %d", got, total)
			}
			t.Logf("%d MiB pushed at a sleeping agent: watcher peak RSS %d KiB, %d stdin-credit frames", total>>20, hwm, c.Credits())
			if hwm > maxHWM {
				t.Errorf("the watcher's peak RSS %d KiB exceeds %d KiB", hwm, maxHWM)
			}
		})
		t.Run(d.name+"/credit-ignored", func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(false))
			spec := stdinSpec(`busybox sleep 30; echo end`, marker)
			spec.Grace = 10 * time.Second
			c.Launch(spec)
			init, err := ktest.BoxInit(c.BoxNamespace(ktest.Slack))
			if err != nil {
				t.Fatal(err)
			}
			box := waitMarkers(t, c, ktest.Slack, marker)
			peak := watchHWM(init.PID)
			chunk := make([]byte, shared.MaxChunk)
			start := time.Now()
			for i := 0; i < total/len(chunk); i++ {
				if c.Send(shared.FrameStdin, chunk) != nil {
					break // the watcher is gone
				}
			}
			requireDead(t, box, start, 5*time.Second, "after input beyond the credit")
			hwm := peak()
			res := c.Wait(10 * time.Second)
			expectExit(t, c, res, shared.ExitLivenessLost, shared.ReasonLivenessLost, true)
			if res.Exit != nil && !strings.Contains(res.Exit.Message, "beyond the credit") {
				t.Errorf("exit message %q, want it to say the input went beyond the credit", res.Exit.Message)
			}
			t.Logf("a host ignoring the credit: %s; watcher peak RSS at least %d KiB", fmtExit(res.Exit), hwm)
			if hwm > maxHWM {
				t.Errorf("the watcher's peak RSS %d KiB exceeds %d KiB", hwm, maxHWM)
			}
		})
	}
}

// TestWatcherInputRefused: stdin frames to a box that asked for no
// input are a protocol error; stdin-eof there changes nothing.
func TestWatcherInputRefused(t *testing.T) {
	bin := watcherBin(t)
	d := pid1FD
	c := ktest.StartController(t, bin, d.options(false))
	c.Launch(shellSpec(`echo up; busybox sleep 30`, newMarker(t)))
	if err := c.SendStdinEOF(); err != nil {
		t.Fatal(err)
	}
	if !c.WaitStdout("up\n", ktest.Slack) {
		t.Fatalf("no output\n%s", c.Diagnostics())
	}
	time.Sleep(200 * time.Millisecond)
	if c.Exited() {
		t.Fatalf("stdin-eof to a box without input ended it\n%s", c.Diagnostics())
	}
	if err := c.Send(shared.FrameStdin, []byte("x")); err != nil {
		t.Fatal(err)
	}
	res := c.Wait(5 * time.Second)
	expectExit(t, c, res, shared.ExitLivenessLost, shared.ReasonLivenessLost, true)
	if res.Exit == nil || !strings.Contains(res.Exit.Message, "takes no input") {
		t.Errorf("exit record %s, want it to say the box takes no input", fmtExit(res.Exit))
	}
}

// TestWatcherAgentFDs: with /dev/null, a stdin pipe or a pty, the agent
// holds exactly fds 0-2 (seen from /proc) and none of them is the
// control stream.
func TestWatcherAgentFDs(t *testing.T) {
	bin := watcherBin(t)
	for _, d := range fourDomains {
		for _, mode := range []string{"null", "stdin", "tty"} {
			t.Run(d.name+"/"+mode, func(t *testing.T) {
				marker := newMarker(t)
				c := ktest.StartController(t, bin, d.options(false))
				// On /dev/null the read ends at once: the shell then
				// waits for the stop frame.
				spec := shellSpec(`echo up; read -r x; echo "got $x"; [ -n "$x" ] || busybox sleep 30; echo end`, marker)
				spec.Stdin = mode == "stdin"
				spec.TTY = mode == "tty"
				c.Launch(spec)
				if !c.WaitStdout("up", ktest.Slack) {
					t.Fatalf("the agent did not start\n%s", c.Diagnostics())
				}
				agent := waitMarkers(t, c, ktest.Slack, marker)[0]
				init, err := ktest.BoxInit(c.BoxNamespace(ktest.Slack))
				if err != nil {
					t.Fatal(err)
				}
				wfds, err := ktest.FDs(init.PID)
				if err != nil {
					t.Fatal(err)
				}
				control := map[string]bool{}
				for _, fd := range controlFDs(d) {
					if wfds[fd] == "" {
						t.Fatalf("the watcher has no fd %d (its control stream): %v", fd, wfds)
					}
					control[wfds[fd]] = true
				}
				fds, err := ktest.FDs(agent.PID)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("agent fds %v; watcher fds %v", fds, wfds)
				if len(fds) != 3 || fds[0] == "" || fds[1] == "" || fds[2] == "" {
					t.Errorf("the agent holds fds %v, want exactly 0, 1 and 2", fds)
				}
				for fd, target := range fds {
					if control[target] {
						t.Errorf("the agent's fd %d is the control stream (%s)", fd, target)
					}
				}
				switch mode {
				case "null":
					if fds[0] != "/dev/null" {
						t.Errorf("stdin %q, want /dev/null", fds[0])
					}
				case "stdin":
					if !strings.HasPrefix(fds[0], "pipe:") || fds[0] == fds[1] || fds[0] == fds[2] {
						t.Errorf("stdin %q, want a pipe of its own", fds[0])
					}
				case "tty":
					if !strings.HasPrefix(fds[0], "/dev/pts/") || fds[1] != fds[0] || fds[2] != fds[0] {
						t.Errorf("fds %v, want the same /dev/pts/N thrice", fds)
					}
				}
				if mode == "null" {
					if err := c.Send(shared.FrameStop, shared.Stop{}.Marshal()); err != nil {
						t.Fatal(err)
					}
					res := c.Wait(10 * time.Second)
					expectExit(t, c, res, shared.SignalStatus(9), shared.ReasonStopped, true)
					return
				}
				if err := c.SendStdin([]byte("line\n")); err != nil {
					t.Fatal(err)
				}
				if !c.WaitStdout("got line", ktest.Slack) {
					t.Fatalf("the agent did not read its input\n%s", c.Diagnostics())
				}
				res := c.Wait(10 * time.Second)
				expectExit(t, c, res, 0, shared.ReasonExited, true)
			})
		}
	}
}

// controlFDs are the watcher's descriptors of the control stream.
func controlFDs(d domain) []int {
	if d.control == ktest.ControlStdin {
		return []int{0, 1}
	}
	return []int{3}
}

// TestWatcherOutputDrained: an agent that writes 1 MiB to stdout (and
// some to stderr) and exits at once loses nothing: every byte, each
// stream in order, arrives before the exit record. 50 runs.
func TestWatcherOutputDrained(t *testing.T) {
	bin := watcherBin(t)
	const n, m = 150000, 20000 // stdout 1,038,895 bytes; stderr 108,894
	wantOut, wantErr := seqOutput(1, n), seqOutput(1, m)
	for i := 0; i < 50; i++ {
		d := fourDomains[i%4]
		c := ktest.StartController(t, bin, d.options(false))
		c.Launch(shellSpec(`busybox seq 1 20000 >&2 & busybox seq 1 150000; wait`, newMarker(t)))
		res := c.Wait(30 * time.Second)
		expectExit(t, c, res, 0, shared.ReasonExited, true)
		if out := c.Stdout(); out != wantOut {
			t.Fatalf("run %d (%s): stdout %d bytes, want %d; first difference at %d", i, d.name, len(out), len(wantOut), firstDiff(out, wantOut))
		}
		if e := c.Stderr(); e != wantErr {
			t.Fatalf("run %d (%s): stderr %d bytes, want %d; first difference at %d", i, d.name, len(e), len(wantErr), firstDiff(e, wantErr))
		}
		requireExitLast(t, c)
	}
}

// requireExitLast fails when a frame follows the exit record.
func requireExitLast(t *testing.T, c *ktest.Controller) {
	t.Helper()
	fs := c.Frames()
	for i, f := range fs {
		if f.Type == shared.FrameExit && i != len(fs)-1 {
			t.Fatalf("%d frames follow the exit record (the first a %v)", len(fs)-1-i, fs[i+1].Type)
		}
	}
}

// seqOutput is what `seq from to` prints.
func seqOutput(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}

func firstDiff(a, b string) int {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// watchHWM samples the peak resident set of a process until it is gone;
// the returned function stops and returns the last value read, in KiB.
func watchHWM(pid int) func() int {
	var last atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			v, err := ktest.StatusField(pid, "VmHWM")
			if err != nil {
				return
			}
			if f := strings.Fields(v); len(f) > 0 {
				if kib, err := strconv.Atoi(f[0]); err == nil {
					last.Store(int64(kib))
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return func() int { close(stop); <-done; return int(last.Load()) }
}

// vmHWM is the peak resident set of a process, in KiB.
func vmHWM(t *testing.T, pid int) int {
	t.Helper()
	v, err := ktest.StatusField(pid, "VmHWM")
	if err != nil {
		t.Fatalf("read VmHWM of %d: %v", pid, err)
	}
	kib, err := strconv.Atoi(strings.Fields(v)[0])
	if err != nil {
		t.Fatalf("VmHWM %q: %v", v, err)
	}
	return kib
}
