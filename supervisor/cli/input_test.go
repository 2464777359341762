//go:build linux

package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deathwatch/shared"
)

// fakeCreditWindow is the fake watcher's credit: small, so that a run
// of a few hundred KiB needs many grants.
const fakeCreditWindow = 4096

// fakeEcho is the "echo-stdin" agent: it grants credit in small steps,
// echoes every stdin frame as stdout, checks the host never has more
// than the granted bytes in flight, and exits 0 at stdin-eof. A broken
// rule ends it with setup-failed and the rule in the message.
func fakeEcho(dir string, spec shared.Spec, r *shared.Reader, w *shared.Writer) shared.Exit {
	broke := func(why string) shared.Exit {
		os.WriteFile(filepath.Join(dir, "broke"), []byte(why), 0o600)
		return shared.Exit{Reason: shared.ReasonSetupFailed, Code: shared.ExitSetupFailed, Message: "fake watcher: " + why}
	}
	if !spec.Stdin && !spec.TTY {
		return broke("spec asks for no input")
	}
	avail := fakeCreditWindow // the host's credit
	w.Send(shared.FrameStdinCredit, shared.Credit{Bytes: fakeCreditWindow}.Marshal())
	var got, maxFlight int
	for {
		f, err := r.Next()
		if err != nil {
			return shared.Exit{Reason: shared.ReasonLivenessLost, Code: shared.ExitLivenessLost}
		}
		switch f.Type {
		case shared.FramePing:
			w.Send(shared.FramePong, f.Payload)
		case shared.FrameStdin:
			if err := shared.CheckStdin(f.Payload); err != nil {
				return broke(err.Error())
			}
			if len(f.Payload) > avail {
				return broke(fmt.Sprintf("stdin of %d bytes beyond the credit (%d)", len(f.Payload), avail))
			}
			avail -= len(f.Payload)
			got += len(f.Payload)
			maxFlight = max(maxFlight, fakeCreditWindow-avail)
			w.Send(shared.FrameStdout, f.Payload)
			// Grant back what was "written", a quarter window at a time.
			if back := fakeCreditWindow - avail; back >= fakeCreditWindow/4 {
				avail += back
				w.Send(shared.FrameStdinCredit, shared.Credit{Bytes: uint32(back)}.Marshal())
			}
		case shared.FrameStdinEOF:
			os.WriteFile(filepath.Join(dir, "stdin-eof"), fmt.Appendf(nil, "got=%d maxflight=%d", got, maxFlight), 0o600)
			return shared.Exit{Reason: shared.ReasonExited}
		case shared.FrameResize:
			rs, _ := shared.ParseResize(f.Payload)
			os.WriteFile(filepath.Join(dir, "resize"), fmt.Appendf(nil, "%dx%d", rs.Rows, rs.Cols), 0o600)
		}
	}
}

// runExecInput is runExec with stdin as the supervisor's stdin.
func runExecInput(t *testing.T, fe *fakeEngine, stdin io.Reader, args ...string) execRun {
	t.Helper()
	var out, errb syncBuf
	full := append([]string{"--journal", filepath.Join(fe.dir, "journal"), "exec", "--watcher", filepath.Join(fe.bin, "watcher")}, args...)
	code := run(full, &cmdContext{stdin: stdin, stdout: &out, stderr: &errb, signals: make(chan os.Signal), getenv: os.LookupEnv})
	return execRun{code: code, stdout: out.String(), stderr: errb.String()}
}

// slowReader hands out its data in reads of at most n bytes.
type slowReader struct {
	r io.Reader
	n int
}

func (s slowReader) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), s.n)]) }

func TestExecStdinRelay(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{Agent: "echo-stdin"})
	data := bytes.Repeat([]byte("0123456789abcdef\n"), 30000) // ~500 KiB, >100 windows
	cases := []struct {
		name string
		in   io.Reader
	}{
		{"large reads", bytes.NewReader(data)},
		{"small reads", slowReader{bytes.NewReader(data), 1000}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(filepath.Join(fe.dir, "broke"))
			r := runExecInput(t, fe, c.in, append(docker, "--stdin", "--", "cat")...)
			if r.code != 0 {
				t.Fatalf("exit %d, want 0; stderr: %s; watcher: %s", r.code, r.stderr, fe.file("broke"))
			}
			if r.stdout != string(data) {
				t.Fatalf("echoed %d bytes, want the %d sent, in order", len(r.stdout), len(data))
			}
			// (The fake watcher ends the box on any stdin beyond its credit.)
			if got := fe.file("stdin-eof"); !strings.HasPrefix(got, fmt.Sprintf("got=%d maxflight=", len(data))) {
				t.Fatalf("stdin-eof record %q", got)
			}
			if got := fe.file("agent-input"); got != "tty=false stdin=true rows=0 cols=0" {
				t.Fatalf("spec input %q", got)
			}
			if len(fe.boxes()) != 0 {
				t.Fatalf("boxes left: %v", fe.boxes())
			}
		})
	}
}

func TestExecInputSpec(t *testing.T) {
	// stdin is no terminal here: no raw mode, the size is unknown (0),
	// and under --tty the input is still relayed (a pty takes input).
	for _, c := range []struct {
		flag, in, spec, eof string
	}{
		{"--stdin", "", "tty=false stdin=true rows=0 cols=0", "got=0 maxflight=0"},
		{"--tty", "ls\n", "tty=true stdin=false rows=0 cols=0", "got=3 maxflight=3"},
	} {
		fe := newFakeEngine(t, fakeScenario{Agent: "echo-stdin"})
		r := runExecInput(t, fe, strings.NewReader(c.in), append(docker, c.flag, "--", "sh")...)
		if r.code != 0 || r.stdout != c.in {
			t.Fatalf("%s: exit %d, stdout %q; want 0 and %q; stderr: %s; watcher: %s", c.flag, r.code, r.stdout, c.in, r.stderr, fe.file("broke"))
		}
		if got := fe.file("agent-input"); got != c.spec {
			t.Fatalf("%s: spec input %q, want %q", c.flag, got, c.spec)
		}
		if got := fe.file("stdin-eof"); got != c.eof {
			t.Fatalf("%s: stdin-eof record %q, want %q", c.flag, got, c.eof)
		}
		assertNoEngineTTY(t, fe)
	}
}

// assertNoEngineTTY: the engine gets -i only; the pty is the watcher's,
// in the box.
func assertNoEngineTTY(t *testing.T, fe *fakeEngine) {
	t.Helper()
	for _, c := range fe.calls() {
		for _, a := range c {
			if a == "-t" || a == "--tty" {
				t.Fatalf("engine call with %s: %q", a, c)
			}
		}
	}
}

func TestExecNoInputNeverReads(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{Agent: "exit:0"})
	r := runExecInput(t, fe, readPanics{}, append(docker, "--", "true")...)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr: %s", r.code, r.stderr)
	}
	if got := fe.file("agent-input"); got != "tty=false stdin=false rows=0 cols=0" {
		t.Fatalf("spec input %q", got)
	}
}

type readPanics struct{}

func (readPanics) Read([]byte) (int, error) { panic("stdin read without --stdin or --tty") }

func TestCRLF(t *testing.T) {
	var b strings.Builder
	n, err := crlf{&b}.Write([]byte("supervisor: a\nb\n"))
	if n != 16 || err != nil || b.String() != "supervisor: a\r\nb\r\n" {
		t.Fatalf("wrote %d (%v): %q", n, err, b.String())
	}
}
