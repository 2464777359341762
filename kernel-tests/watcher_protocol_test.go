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

func rawHeader(t shared.FrameType, size uint32) []byte {
	return []byte{byte(t), byte(size >> 24), byte(size >> 16), byte(size >> 8), byte(size)}
}

// TestWatcherProtocolErrors: once the agent runs, garbage, unknown,
// oversized, truncated and undecodable frames (and plain EOF) kill the
// box at once, whatever the grace, and the exit record says
// liveness-lost (245).
func TestWatcherProtocolErrors(t *testing.T) {
	bin := watcherBin(t)
	cases := []struct {
		name  string
		send  []byte
		close bool // end the host→box direction after send
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: box\r\n\r\n"), false},
		{"unknown-type", rawHeader(0x7f, 0), false},
		{"oversized", rawHeader(shared.FrameStdin, shared.MaxPayload+1), false},
		{"oversized-4GiB", rawHeader(shared.FrameStdout, 0xffffffff), false},
		{"box-to-host-type", shared.AppendFrame(nil, shared.FrameExit, shared.Exit{Reason: shared.ReasonExited}.Marshal()), false},
		{"truncated-header", []byte{byte(shared.FramePing), 0, 0}, true},
		{"truncated-payload", append(rawHeader(shared.FrameStdin, 100), "only ten b"...), true},
		{"bad-ping-payload", shared.AppendFrame(nil, shared.FramePing, []byte{0xff}), false},
		{"bad-signal-payload", shared.AppendFrame(nil, shared.FrameSignal, []byte{0}), false},
		{"second-spec", shared.AppendFrame(nil, shared.FrameSpec, shellSpec("exit 3", "x").Marshal()), false},
		{"eof", nil, true},
	}
	for i, tc := range cases {
		d := twoDomains[i%2]
		t.Run(tc.name+"/"+d.name, func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(false))
			spec := shellSpec(treeScript, marker)
			spec.Grace = 10 * time.Second // a liveness loss must not wait for it
			c.Launch(spec)
			if !c.WaitStdout("started", 5*time.Second) {
				t.Fatalf("the agent did not start\n%s", c.Diagnostics())
			}
			waitMarkers(t, c, 5*time.Second, marker, marker+"-setsid", marker+"-noterm")
			box := ktest.InNamespace(c.BoxNamespace(5 * time.Second))
			sent := time.Now()
			if len(tc.send) > 0 {
				if err := c.SendRaw(tc.send); err != nil {
					t.Fatalf("send: %v", err)
				}
			}
			if tc.close {
				if err := c.CloseWrite(); err != nil {
					t.Fatalf("close the write side: %v", err)
				}
			}
			took := requireDead(t, box, sent, 3*time.Second, "after "+tc.name)
			res := c.Wait(5 * time.Second)
			t.Logf("%s → box dead after %s; %s", tc.name, took.Round(10*time.Microsecond), fmtExit(res.Exit))
			if tc.name == "second-spec" && res.Code != shared.ExitLivenessLost {
				// A second spec is not named by the contract; report what
				// the watcher did rather than fail on it.
				t.Logf("a second spec frame after the start ended the box with %d (%s)", res.Code, fmtExit(res.Exit))
				return
			}
			expectExit(t, c, res, shared.ExitLivenessLost, shared.ReasonLivenessLost, true)
			requireOneLogLine(t, c.WatcherOutput())
		})
	}
}

// requireOneLogLine: a protocol or setup error prints one line, prefixed
// "watcher: ", on the watcher's stderr (and nothing on its stdout).
func requireOneLogLine(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "watcher: ") {
		t.Errorf("the watcher's own output is %d lines %q, want one line starting with \"watcher: \"", len(lines), out)
	}
}

// TestWatcherSetupErrors: what goes wrong before the agent starts — a
// bad or undecodable spec, a refused uid, a command that cannot run, a
// stream that ends — ends the watcher with the contract's code and a
// record saying why, and no agent runs.
func TestWatcherSetupErrors(t *testing.T) {
	bin := watcherBin(t)
	notExec := filepath.Join(readyDir(t), "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := shellSpec("exit 0", "x")
	with := func(mod func(*shared.Spec)) []byte { s := good; mod(&s); return s.Marshal() }
	hello := shared.AppendFrame(nil, shared.FrameHello, shared.Hello{Version: shared.ProtocolVersion, Nonce: "n"}.Marshal())
	cases := []struct {
		name   string
		stream []byte
		codes  []int // acceptable exit codes, the first the expected one
		reason shared.Reason
	}{
		{"invalid-spec-relative-workdir", shared.AppendFrame(hello, shared.FrameSpec, with(func(s *shared.Spec) { s.Workdir = "tmp" })), []int{shared.ExitUsage}, shared.ReasonSetupFailed},
		{"invalid-spec-empty-argv", shared.AppendFrame(hello, shared.FrameSpec, with(func(s *shared.Spec) { s.Argv = nil })), []int{shared.ExitUsage}, shared.ReasonSetupFailed},
		{"uid-0-refused", shared.AppendFrame(hello, shared.FrameSpec, with(func(s *shared.Spec) { s.UID, s.GID = 0, 0 })), []int{shared.ExitRefused, shared.ExitUsage}, shared.ReasonSetupFailed},
		{"undecodable-spec", shared.AppendFrame(hello, shared.FrameSpec, []byte{0xff, 0xff, 0xff}), []int{shared.ExitLivenessLost}, shared.ReasonLivenessLost},
		{"not-found", shared.AppendFrame(hello, shared.FrameSpec, with(func(s *shared.Spec) { s.Argv = []string{"/nonexistent/agent"} })), []int{shared.ExitNotFound}, shared.ReasonSetupFailed},
		{"not-executable", shared.AppendFrame(hello, shared.FrameSpec, with(func(s *shared.Spec) { s.Argv = []string{notExec} })), []int{shared.ExitCannotExec}, shared.ReasonSetupFailed},
		{"spec-before-hello", shared.AppendFrame(nil, shared.FrameSpec, good.Marshal()), []int{shared.ExitLivenessLost, shared.ExitUsage}, ""},
		{"wrong-version", shared.AppendFrame(shared.AppendFrame(nil, shared.FrameHello, shared.Hello{Version: 99}.Marshal()), shared.FrameSpec, good.Marshal()), []int{shared.ExitRefused, shared.ExitUsage, shared.ExitLivenessLost}, ""},
		{"garbage-first", []byte("\x00\x00\x00\x00\x01x"), []int{shared.ExitLivenessLost}, shared.ReasonLivenessLost},
		{"eof-after-hello", hello, []int{shared.ExitLivenessLost}, shared.ReasonLivenessLost},
	}
	for i, tc := range cases {
		d := twoDomains[i%2]
		t.Run(tc.name+"/"+d.name, func(t *testing.T) {
			c := ktest.StartController(t, bin, d.options(false))
			if err := c.SendRaw(tc.stream); err != nil {
				t.Fatalf("send: %v", err)
			}
			if tc.name == "eof-after-hello" {
				_ = c.CloseWrite()
			}
			res := c.Wait(10 * time.Second)
			t.Logf("%s: exit %d; %s; watcher: %q", tc.name, res.Code, fmtExit(res.Exit), c.WatcherOutput())
			execFailure := tc.name == "not-found" || tc.name == "not-executable"
			if _, ok := c.WaitFrame(shared.FrameReady, 0); ok && !execFailure {
				t.Errorf("the watcher started the agent (sent ready)")
			}
			ok := false
			for _, code := range tc.codes {
				ok = ok || res.Code == code
			}
			if !ok {
				t.Errorf("exit status %d, want %v\n%s", res.Code, tc.codes, c.Diagnostics())
			}
			// A setup failure the exit record carries is said once, by the
			// record (the supervisor prints it); any other end, one line of
			// the watcher's own.
			if res.Exit != nil && res.Exit.Reason == shared.ReasonSetupFailed {
				if out := c.WatcherOutput(); out != "" {
					t.Errorf("the watcher printed %q beside the exit record that carries the failure: said twice", out)
				}
			} else {
				requireOneLogLine(t, c.WatcherOutput())
			}
			if tc.reason == "" {
				return // the contract names no reason for this case
			}
			switch {
			case res.Exit == nil:
				t.Errorf("no exit record, want reason %s\n%s", tc.reason, c.Diagnostics())
			case res.Exit.Reason != tc.reason || res.Exit.Code != res.Code:
				t.Errorf("exit record %s, want reason %s and code %d", fmtExit(res.Exit), tc.reason, res.Code)
			case tc.reason == shared.ReasonSetupFailed && res.Exit.Message == "":
				t.Errorf("a setup failure without a message: %s", fmtExit(res.Exit))
			}
		})
	}
}

// TestWatcherEOFRightAfterSpec: the stream ends right after the spec,
// while the watcher is still starting the agent. The EOF must not be
// lost in that gap: the box dies at once and the watcher exits 245.
func TestWatcherEOFRightAfterSpec(t *testing.T) {
	bin := watcherBin(t)
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, d.options(false))
			stream := shared.AppendFrame(nil, shared.FrameHello, shared.Hello{Version: shared.ProtocolVersion, Nonce: "n"}.Marshal())
			stream = shared.AppendFrame(stream, shared.FrameSpec, shellSpec(treeScript, marker).Marshal())
			sent := time.Now()
			if err := c.SendRaw(stream); err != nil {
				t.Fatal(err)
			}
			if err := c.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			res := c.Wait(5 * time.Second)
			t.Logf("EOF right after the spec: watcher exit %d after %s; %s", res.Code, res.At.Sub(sent).Round(time.Millisecond), fmtExit(res.Exit))
			expectExit(t, c, res, shared.ExitLivenessLost, shared.ReasonLivenessLost, true)
			if left := append(ktest.WithMarker(marker), ktest.WithMarker(marker+"-noterm")...); len(left) > 0 {
				if _, alive := ktest.WaitDead(left, time.Now(), ktest.Slack); len(alive) > 0 {
					t.Errorf("agent processes outlived the watcher: %s", ktest.Describe(alive))
				}
			}
		})
	}
}

// TestWatcherSpecTimeout: a box whose host never attaches (it created
// the box and died; a Kubernetes pod starts at once with nobody on its
// stdin) does not keep its watcher waiting for ever: without a hello and
// a spec within --spec-timeout the watcher exits with liveness lost and
// says why in one line. No agent ever ran.
func TestWatcherSpecTimeout(t *testing.T) {
	bin := watcherBin(t)
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			start := time.Now()
			c := ktest.StartController(t, bin, d.options(false, "--spec-timeout=1s"))
			res := c.Wait(time.Second + ktest.Slack)
			took := time.Since(start)
			t.Logf("no spec → watcher exit %d after %v; %s", res.Code, took.Round(time.Millisecond), fmtExit(res.Exit))
			expectExit(t, c, res, shared.ExitLivenessLost, shared.ReasonLivenessLost, true)
			if took < time.Second {
				t.Errorf("the watcher gave up after %v, before its --spec-timeout of 1s", took)
			}
			if res.Exit != nil && !strings.Contains(res.Exit.Message, "spec-timeout") {
				t.Errorf("exit message %q does not name --spec-timeout", res.Exit.Message)
			}
			requireOneLogLine(t, c.WatcherOutput())
		})
	}
}
