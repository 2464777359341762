//go:build linux

package copy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"golang.org/x/sys/unix"
)

// memRuntime keeps its boxes in memory; it starts none.
type memRuntime struct {
	mu    sync.Mutex
	boxes map[string]supervisor.Listed
}

func (m *memRuntime) Name() string { return "memrt" }
func (m *memRuntime) Probe(context.Context) (supervisor.Info, error) {
	return supervisor.Info{Runtime: "memrt", Present: true}, nil
}
func (m *memRuntime) Create(context.Context, *supervisor.Box) error { return nil }
func (m *memRuntime) Start(context.Context, *supervisor.Box) (*supervisor.Started, error) {
	return nil, errors.New("no")
}
func (m *memRuntime) Remove(_ context.Context, b *supervisor.Box) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.boxes, b.Name)
	return nil
}
func (m *memRuntime) Exists(_ context.Context, b *supervisor.Box) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.boxes[b.Name]
	return ok, nil
}
func (m *memRuntime) HostPID(context.Context, *supervisor.Box) (int, error) { return 0, nil }
func (m *memRuntime) List(context.Context, string) ([]supervisor.Listed, error) {
	return nil, nil
}

// copyRuntime starts no box: the watcher's half of the stream is played
// in the test by the real shared copy code, with a way to tamper with
// it on the way (what a broken or hostile middle would do).
type copyRuntime struct {
	*memRuntime
	boxRoot string                             // the box's tree, for copy-out
	inRoot  string                             // where copy-in lands
	tamper  func(t shared.FrameType, p []byte) // may alter a frame about to go to the host
	inErr   error                              // what the copy-in receiver said
	failIn  bool                               // end as a watcher whose copy-in did not verify
}

func (c *copyRuntime) Name() string { return "copyrt" }

var theCopyRT = &copyRuntime{memRuntime: &memRuntime{boxes: map[string]supervisor.Listed{}}}

func init() {
	supervisor.Register(supervisor.Descriptor{Name: "copyrt", Bounds: supervisor.Bounds{Dead: time.Second, Removed: time.Second},
		New: func(supervisor.RuntimeConfig) (supervisor.Runtime, error) { return theCopyRT, nil }})
}

func (c *copyRuntime) Start(context.Context, *supervisor.Box) (*supervisor.Started, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	host, box := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "box")
	done := make(chan struct{})
	go func() { defer close(done); defer box.Close(); c.play(box) }()
	return &supervisor.Started{Control: host, Wait: func() error { <-done; return nil }, Kill: func() { box.Close() }}, nil
}

func (c *copyRuntime) play(box io.ReadWriter) {
	r := shared.NewReader(bufio.NewReader(box))
	w := shared.NewWriter(box)
	next := func() shared.Frame {
		for {
			f, err := r.Next()
			if err != nil || f.Type != shared.FramePing {
				return f
			}
		}
	}
	next() // hello
	spec, _ := shared.ParseSpec(next().Payload)
	if len(spec.CopyIn) > 0 {
		root, _ := unix.Open(c.inRoot, unix.O_PATH|unix.O_DIRECTORY, 0)
		defer unix.Close(root)
		recv := &shared.CopyReceiver{Root: root}
		for _, p := range spec.CopyIn {
			recv.Bases = append(recv.Bases, strings.TrimPrefix(p, "/"))
		}
		for left := len(spec.CopyIn); left > 0; {
			done, _, err := recv.Frame(shared.CopyInFrames, next())
			if err == nil && c.failIn {
				err = &shared.VerifyError{Reason: "a: SHA-256 differs"}
			}
			if err != nil {
				c.inErr = err
				w.Send(shared.FrameExit, shared.Exit{Reason: shared.ReasonVerifyFailed, Code: shared.ExitCopyFailed, Message: "copy-in: " + err.Error()}.Marshal())
				return
			}
			if done {
				left--
			}
		}
	}
	w.Send(shared.FrameReady, shared.Ready{PID: 2, Started: time.Now()}.Marshal())
	if len(spec.CopyOut) > 0 {
		s := &shared.CopySender{Frames: shared.CopyOutFrames, Limit: spec.CopyOutLimit, ManifestOnly: spec.CopyOutArchive,
			// The watcher's rule: the agent's files, or what all may read.
			Allow: func(uid, mode uint32) bool { return uid == spec.UID || mode&0o004 != 0 },
			Send: func(t shared.FrameType, p []byte) error {
				if c.tamper != nil {
					c.tamper(t, p)
				}
				return w.Send(t, p)
			}}
		root, _ := unix.Open(c.boxRoot, unix.O_PATH|unix.O_DIRECTORY, 0)
		for i, p := range spec.CopyOut {
			s.SendTree(uint32(i), root, strings.TrimPrefix(p, "/"))
		}
		unix.Close(root)
		// An archive copy-out: the host reads the box, then says so.
		for spec.CopyOutArchive {
			if f := next(); f.Type == shared.FrameCopyOutFetched || f.Type == 0 {
				break
			}
		}
	}
	w.Send(shared.FrameExit, shared.Exit{Reason: shared.ReasonExited}.Marshal())
}

type copyRun struct {
	code   int
	stderr string
	events []supervisor.Event
}

func runCopy(t *testing.T, o supervisor.ExecOptions, co Options) copyRun {
	t.Helper()
	o.Instance, o.JournalDir, o.WatcherPath = "cp", t.TempDir(), "/x/watcher"
	if o.Runtime == "" {
		o.Runtime = "copyrt"
	}
	o.UID, o.GID, o.Argv = 1000, 1000, []string{"true"}
	o.Parties = []supervisor.Party{New(co)}
	var stderr strings.Builder
	var evs []supervisor.Event
	o.IO = supervisor.ExecIO{Stdout: io.Discard, Stderr: &stderr, Signals: make(chan os.Signal),
		OnEvent: func(ev supervisor.Event) { evs = append(evs, ev) },
		Say:     func(line string) { fmt.Fprintf(&stderr, "supervisor: %s\n", line) }}
	r, err := supervisor.Exec(context.Background(), o)
	if err != nil {
		fmt.Fprintf(&stderr, "supervisor: %v\n", err)
	}
	code := r.Code
	return copyRun{code, stderr.String(), evs}
}

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCopyOutVerified(t *testing.T) {
	box, out := t.TempDir(), t.TempDir()
	write(t, filepath.Join(box, "res/a"), "alpha")
	write(t, filepath.Join(box, "res/sub/b"), strings.Repeat("b", 300000))
	os.Symlink("/etc/passwd", filepath.Join(box, "res/evil"))
	os.Symlink("../a", filepath.Join(box, "res/sub/ok"))
	theCopyRT.boxRoot, theCopyRT.tamper = box, nil
	run := runCopy(t, supervisor.ExecOptions{}, Options{Out: []CopyOut{{Box: "/res", HostDir: out}}})
	if run.code != 0 {
		t.Fatalf("exit %d: %s", run.code, run.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "res/sub/b")); len(b) != 300000 {
		t.Errorf("res/sub/b: %d bytes", len(b))
	}
	if _, err := os.Lstat(filepath.Join(out, "res/evil")); err == nil || !strings.Contains(run.stderr, "evil -> /etc/passwd") {
		t.Errorf("the symlink to a host path was made (%v) or not said: %s", err, run.stderr)
	}
	if l, _ := os.Readlink(filepath.Join(out, "res/sub/ok")); l != "../a" {
		t.Errorf("res/sub/ok -> %q", l)
	}
	m, err := os.ReadFile(filepath.Join(out, "res.manifest"))
	if err != nil || !strings.Contains(string(m), `file 644 5 8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8 "a"`) {
		t.Errorf("manifest (%v):\n%s", err, m)
	}
	var names []string
	for _, ev := range run.events {
		names = append(names, ev.Event)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "ready exported verified exited") {
		t.Errorf("events %s", got)
	}
}

// A byte changed on the way, a file that vanished from the stream, an
// entry that claims another size: each fails the launch with exit 248
// and reason verify-failed, and nothing of the copy-out is kept.
func TestCopyOutTampered(t *testing.T) {
	for name, tamper := range map[string]func(shared.FrameType, []byte){
		"data byte": func(t shared.FrameType, p []byte) {
			if t == shared.FrameCopyOutData {
				p[len(p)-1] ^= 1
			}
		},
		"digest": func(t shared.FrameType, p []byte) {
			if t == shared.FrameCopyOutSum {
				p[0] ^= 1
			}
		},
		"manifest": func(t shared.FrameType, p []byte) {
			if t == shared.FrameCopyOutEnd {
				p[len(p)-2] ^= 1 // the digest's last byte (the error, empty, follows)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			box, out := t.TempDir(), t.TempDir()
			write(t, filepath.Join(box, "res/a"), "alpha")
			theCopyRT.boxRoot, theCopyRT.tamper = box, tamper
			run := runCopy(t, supervisor.ExecOptions{}, Options{Out: []CopyOut{{Box: "/res", HostDir: out}}})
			theCopyRT.tamper = nil
			last := run.events[len(run.events)-2]
			if run.code != shared.ExitCopyFailed || last.Reason != string(shared.ReasonVerifyFailed) || !strings.Contains(run.stderr, "verify-failed") {
				t.Fatalf("exit %d, exited %+v, stderr %s", run.code, last, run.stderr)
			}
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Errorf("kept after a failed verification: %v", ents)
			}
		})
	}
}

// A path that leaves the tree is a protocol error: the stream is
// closed (the box dies) and nothing is written outside.
func TestCopyOutPathEscape(t *testing.T) {
	box, out := t.TempDir(), t.TempDir()
	write(t, filepath.Join(box, "res/a"), "alpha")
	theCopyRT.boxRoot = box
	theCopyRT.tamper = func(t shared.FrameType, p []byte) {
		if t == shared.FrameCopyOutEntry && strings.Contains(string(p), "\x01a") {
			copy(p[1:], "\x01/") // the path "a" becomes "/": not a relative path
		}
	}
	run := runCopy(t, supervisor.ExecOptions{}, Options{Out: []CopyOut{{Box: "/res", HostDir: out}}})
	theCopyRT.tamper = nil
	if run.code != shared.ExitLivenessLost || !strings.Contains(run.stderr, "not a clean relative path") {
		t.Fatalf("exit %d: %s", run.code, run.stderr)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("kept: %v", ents)
	}
}

func TestCopyOutLimitAndOverwrite(t *testing.T) {
	box, out := t.TempDir(), t.TempDir()
	write(t, filepath.Join(box, "res/big"), strings.Repeat("x", 5000))
	theCopyRT.boxRoot = box
	run := runCopy(t, supervisor.ExecOptions{}, Options{Out: []CopyOut{{Box: "/res", HostDir: out}}, OutLimit: 4096})
	if run.code != shared.ExitCopyFailed || !strings.Contains(run.stderr, "limit") {
		t.Fatalf("exit %d: %s", run.code, run.stderr)
	}
	write(t, filepath.Join(out, "res"), "mine")
	run = runCopy(t, supervisor.ExecOptions{}, Options{Out: []CopyOut{{Box: "/res", HostDir: out}}})
	if run.code != shared.ExitUsage || !strings.Contains(run.stderr, "never overwrites") {
		t.Fatalf("exit %d: %s", run.code, run.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "res")); string(b) != "mine" {
		t.Errorf("overwritten: %q", b)
	}
}

func TestCopyInStaged(t *testing.T) {
	src, in := t.TempDir(), t.TempDir()
	write(t, filepath.Join(src, "tree/a"), "alpha")
	os.Symlink("a", filepath.Join(src, "tree/l"))
	theCopyRT.inRoot, theCopyRT.inErr = in, nil
	run := runCopy(t, supervisor.ExecOptions{}, Options{In: []CopyIn{{Host: filepath.Join(src, "tree"), Box: "/work/tree"}}})
	if run.code != 0 || theCopyRT.inErr != nil {
		t.Fatalf("exit %d, receiver %v: %s", run.code, theCopyRT.inErr, run.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(in, "work/tree/a")); string(b) != "alpha" {
		t.Errorf("work/tree/a = %q", b)
	}
	var staged *supervisor.Event
	for i := range run.events {
		if run.events[i].Event == supervisor.EventStaged {
			staged = &run.events[i]
		}
	}
	if staged == nil || staged.Files != 1 || staged.Bytes != 5 {
		t.Errorf("staged event %+v", staged)
	}
}

// A copy-in that does not verify keeps its own reason, though the
// copy-out it asked for never came.
func TestCopyInFailureKeepsItsReason(t *testing.T) {
	src, in, out := t.TempDir(), t.TempDir(), t.TempDir()
	write(t, filepath.Join(src, "tree/a"), "alpha")
	theCopyRT.inRoot, theCopyRT.inErr = in, nil
	theCopyRT.failIn = true
	defer func() { theCopyRT.failIn = false }()
	run := runCopy(t, supervisor.ExecOptions{}, Options{In: []CopyIn{{Host: filepath.Join(src, "tree"), Box: "/w"}}, Out: []CopyOut{{Box: "/res", HostDir: out}}})
	last := run.events[len(run.events)-2]
	if run.code != shared.ExitCopyFailed || last.Reason != string(shared.ReasonVerifyFailed) || strings.Contains(run.stderr, "copy-out") {
		t.Fatalf("exit %d, exited %+v, stderr %s", run.code, last, run.stderr)
	}
}

// A watcher that does not keep --copy-out-max-entries (the fake one
// here sends every entry) is stopped by the host at the limit: exit
// 248, nothing kept.
func TestCopyOutMaxEntriesHost(t *testing.T) {
	box, out := t.TempDir(), t.TempDir()
	for i := 0; i < 50; i++ {
		write(t, filepath.Join(box, "res", strings.Repeat("f", i+1)), "")
	}
	theCopyRT.boxRoot, theArchiveRT.boxRoot = box, box
	// By frames, and by archive (the manifest's entries are counted).
	for _, rt := range []string{"copyrt", "copyrt-archive"} {
		run := runCopy(t, supervisor.ExecOptions{Runtime: rt}, Options{Out: []CopyOut{{Box: "/res", HostDir: out}}, OutMaxEntries: 10})
		if run.code != shared.ExitCopyFailed || !strings.Contains(run.stderr, "10 entries") {
			t.Fatalf("%s: exit %d: %s", rt, run.code, run.stderr)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("%s: kept: %v", rt, ents)
		}
	}
}

// A copy-in source that is not there is a refused copy (248), before
// anything exists.
func TestCheckMissingSource(t *testing.T) {
	err := New(Options{In: []CopyIn{{Host: filepath.Join(t.TempDir(), "nosuch"), Box: "/x"}}}).Check()
	if exitcode.Of(err, 0) != shared.ExitCopyFailed || !strings.Contains(err.Error(), "--copy-in") {
		t.Errorf("missing source: %v (code %d), want %d", err, exitcode.Of(err, 0), shared.ExitCopyFailed)
	}
}
