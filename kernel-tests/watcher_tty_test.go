package kerneltests

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/shared/seccomp"
)

// ttySpec runs argv as uid:gid 1000:1000 on a pty of rows x cols,
// behind the default syscall filter as the supervisor sends it (the
// controlling terminal is taken under it).
func ttySpec(rows, cols uint16, argv ...string) shared.Spec {
	return shared.Spec{
		Seccomp: seccomp.Default(false),
		Argv:    argv,
		Env:     []string{agentPath, "PS1=$ "},
		UID:     shared.DefaultAgentUID,
		GID:     shared.DefaultAgentGID,
		Grace:   time.Second,
		TTY:     true,
		Rows:    rows,
		Cols:    cols,
	}
}

// typeLine sends s and a newline as the terminal's input.
func typeLine(t *testing.T, c *ktest.Controller, s string) {
	t.Helper()
	if err := c.SendStdin([]byte(s + "\n")); err != nil {
		t.Fatalf("type %q: %v\n%s", s, err, c.Diagnostics())
	}
}

// waitScreen waits until the agent's output (the pty's, \r\n and the
// echo of what was typed included) matches re.
func waitScreen(t *testing.T, c *ktest.Controller, re string, timeout time.Duration) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	if !ktest.WaitFor(timeout, func() bool { m = rx.FindStringSubmatch(c.Stdout()); return m != nil || c.Exited() }) || m == nil {
		t.Fatalf("the terminal never showed %q within %s\n%s", re, timeout, c.Diagnostics())
	}
	return m
}

// TestWatcherTTY: with tty in the spec the agent runs on a pty the
// watcher allocates in the box: `tty` names a /dev/pts device, `stty
// size` reports the spec's size and then follows resize frames, an
// interactive shell has job control (a foreground command leads its own
// process group, the terminal's foreground one; ^C typed through stdin
// frames interrupts it and the shell carries on), and stdin-eof is the
// terminal's ^D: the shell exits 0.
func TestWatcherTTY(t *testing.T) {
	bin := watcherBin(t)
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			c := ktest.StartController(t, bin, d.options(false))
			c.Launch(ttySpec(24, 80, bbox, "sh", "-i"))
			if _, ok := c.WaitFrame(shared.FrameStdinCredit, 0); ok {
				t.Fatal("stdin-credit is not kept among the frames")
			}
			if !ktest.WaitFor(ktest.Slack, func() bool { return c.Stdin.Avail() == shared.StdinWindowSize }) {
				t.Fatalf("no stdin-credit of %d bytes after ready (have %d)\n%s", shared.StdinWindowSize, c.Stdin.Avail(), c.Diagnostics())
			}

			typeLine(t, c, `tty; stty size; echo "x$((6*7))"`)
			m := waitScreen(t, c, `(/dev/pts/\d+)\r\n(\d+ \d+)\r\nx42\r\n`, ktest.Slack)
			if m[2] != "24 80" {
				t.Errorf("stty size at the start: %q, want \"24 80\" (the spec's)", m[2])
			}
			if strings.Contains(c.Stdout(), "job control turned off") {
				t.Errorf("the interactive shell has no job control\n%s", c.Stdout())
			}

			if err := c.Resize(50, 132); err != nil {
				t.Fatal(err)
			}
			typeLine(t, c, `stty size; echo "y$((6*7))"`)
			m = waitScreen(t, c, `(\d+ \d+)\r\ny42\r\n`, ktest.Slack)
			if m[1] != "50 132" {
				t.Errorf("stty size after a resize frame to 50x132: %q", m[1])
			}

			// Job control: a foreground job leads its own process group,
			// which is the terminal's foreground group.
			typeLine(t, c, `busybox awk '{ print "job pid=" $1 " pgrp=" $5 " tpgid=" $8 }' /proc/self/stat`)
			m = waitScreen(t, c, `job pid=(\d+) pgrp=(\d+) tpgid=(\d+)\r\n`, ktest.Slack)
			if m[1] != m[2] || m[2] != m[3] {
				t.Errorf("a foreground job: pid %s, process group %s, terminal's foreground group %s: want all three equal", m[1], m[2], m[3])
			}

			// ^C typed through a stdin frame interrupts the foreground
			// job (the shell would not answer for a minute otherwise)
			// and not the shell.
			typeLine(t, c, `busybox sleep 60`)
			ns := c.BoxNamespace(ktest.Slack)
			var sleeper []ktest.Proc
			if !ktest.WaitFor(ktest.Slack, func() bool {
				sleeper = nil
				for _, p := range ktest.InNamespace(ns) {
					if strings.Join(ktest.Cmdline(p.PID), " ") == "busybox sleep 60" {
						sleeper = append(sleeper, p)
					}
				}
				return len(sleeper) > 0
			}) {
				t.Fatalf("the foreground job did not start\n%s", c.Diagnostics())
			}
			sent := time.Now()
			if err := c.SendStdin([]byte{0x03}); err != nil {
				t.Fatal(err)
			}
			typeLine(t, c, `echo "after ^C $((40+2))"`)
			waitScreen(t, c, `after \^C 42\r\n`, ktest.Slack)
			t.Logf("^C through a stdin frame: the shell answered %s later", time.Since(sent).Round(time.Millisecond))
			requireDead(t, sleeper, sent, ktest.Slack, "the foreground job after ^C")

			endInput(t, c) // ^D at the prompt
		})
	}
}

// TestWatcherTTYOutputDrained: an agent on a pty that writes and exits
// at once loses nothing: the master is read until EIO before the exit
// record.
func TestWatcherTTYOutputDrained(t *testing.T) {
	bin := watcherBin(t)
	const n = 100000
	for i := 0; i < 10; i++ {
		d := twoDomains[i%2]
		c := ktest.StartController(t, bin, d.options(false))
		spec := ttySpec(0, 0, bbox, "seq", "1", "100000")
		c.Launch(spec)
		res := c.Wait(30 * time.Second)
		expectExit(t, c, res, 0, shared.ReasonExited, true)
		out := strings.ReplaceAll(c.Stdout(), "\r\n", "\n")
		if out != seqOutput(1, n) {
			t.Fatalf("run %d (%s): the pty relayed %d bytes ending %q, want %d", i, d.name, len(out), out[max(0, len(out)-20):], len(seqOutput(1, n)))
		}
		requireExitLast(t, c)
	}
}
