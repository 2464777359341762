package kerneltests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/runtime/native"
)

// The native runtime driven directly through the Runtime interface, the
// way the lifecycle drives it: Create, Start, hello + spec over the
// control stream, frames until exit, Remove.

// nativeRT is the runtime as root tests use it: the init stage is the
// built supervisor binary (the test binary has no such mode).
func nativeRT(t *testing.T, opts native.Options) (*native.Native, ktest.Binaries) {
	t.Helper()
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	if opts.Self == "" {
		opts.Self = bins.Supervisor
	}
	if opts.StateDir == "" {
		opts.StateDir = t.TempDir()
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return native.New(log, opts), bins
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func boxName(t *testing.T) string {
	b := make([]byte, 4)
	rand.Read(b)
	return "dwk-" + hex.EncodeToString(b)
}

// newBox is a box with the watcher and a fresh name.
func newBox(t *testing.T, bins ktest.Binaries) *supervisor.Box {
	name := boxName(t)
	return &supervisor.Box{
		Name: name, LaunchID: name, Nonce: "n-" + name, WatcherPath: bins.Watcher, Network: "none",
		Labels: map[string]string{shared.LabelInstance: "ktest", shared.LabelManaged: "true"},
		State:  map[string]string{},
	}
}

// boxRun is what one box run returned.
type boxRun struct {
	Stdout, Stderr string
	Ready          shared.Ready
	Exit           shared.Exit
	Started        time.Duration // Start returned (from before Create)
	ReadyAt        time.Duration // ready frame (from before Create)
	Total          time.Duration // exit frame (from before Create)
}

// agentSpec is a spec for argv as the default agent (1000:1000).
func agentSpec(argv ...string) shared.Spec {
	return shared.Spec{Argv: argv, UID: shared.DefaultAgentUID, GID: shared.DefaultAgentGID, Grace: 500 * time.Millisecond,
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
}

// runBox creates and starts b, runs spec in it to the end, and removes
// it. during, if set, runs once the agent is ready.
func runBox(t *testing.T, rt supervisor.Runtime, b *supervisor.Box, spec shared.Spec, during func(ready shared.Ready)) boxRun {
	t.Helper()
	r, err := runBoxEOF(t, rt, b, spec, during)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return r
}

// runBoxEOF is runBox for a box whose stream may end without an exit
// record (its PID 1 died): it returns that as an error after the box
// init was reaped.
func runBoxEOF(t *testing.T, rt supervisor.Runtime, b *supervisor.Box, spec shared.Spec, during func(ready shared.Ready)) (boxRun, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := rt.Create(ctx, b); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := rt.Remove(context.Background(), b); err != nil {
			t.Errorf("remove: %v", err)
		}
	})
	st, err := rt.Start(ctx, b)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	var r boxRun
	r.Started = time.Since(t0)
	defer st.Control.Close()
	w := shared.NewWriter(st.Control)
	if err := w.Send(shared.FrameHello, shared.Hello{Version: shared.ProtocolVersion, Nonce: b.Nonce}.Marshal()); err != nil {
		t.Fatalf("send hello: %v", err)
	}
	if err := w.Send(shared.FrameSpec, spec.Marshal()); err != nil {
		t.Fatalf("send spec: %v", err)
	}
	var stdout, stderr bytes.Buffer
	rd := shared.NewReader(st.Control)
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			st.Kill()
		case <-done:
		}
	}()
	defer close(done)
	for {
		f, err := rd.Next()
		if err != nil {
			r.Total = time.Since(t0)
			r.Stdout, r.Stderr = stdout.String(), stderr.String()
			st.Control.Close()
			werr := st.Wait()
			return r, fmt.Errorf("read frame: %v (box init: %v; stdout %q, stderr %q)", err, werr, stdout.String(), stderr.String())
		}
		switch f.Type {
		case shared.FrameReady:
			r.ReadyAt = time.Since(t0)
			if r.Ready, err = shared.ParseReady(f.Payload); err != nil {
				t.Fatalf("ready: %v", err)
			}
			if during != nil {
				during(r.Ready)
			}
		case shared.FrameStdout:
			stdout.Write(f.Payload)
		case shared.FrameStderr:
			stderr.Write(f.Payload)
		case shared.FrameExit:
			r.Total = time.Since(t0)
			if r.Exit, err = shared.ParseExit(f.Payload); err != nil {
				t.Fatalf("exit: %v", err)
			}
			r.Stdout, r.Stderr = stdout.String(), stderr.String()
			st.Control.Close()
			if err := st.Wait(); err != nil {
				var ee interface{ ExitCode() int }
				if !errors.As(err, &ee) || ee.ExitCode() != r.Exit.Code {
					t.Errorf("box init: %v, exit frame code %d", err, r.Exit.Code)
				}
			}
			return r, nil
		}
	}
}

// startBox creates and starts b and sends spec; it returns the stream
// for the test to hold (and drop).
func startBox(t *testing.T, rt supervisor.Runtime, b *supervisor.Box, spec shared.Spec) (*supervisor.Started, *shared.Reader) {
	t.Helper()
	if err := rt.Create(context.Background(), b); err != nil {
		t.Fatalf("create: %v", err)
	}
	return startCreated(t, rt, b, spec)
}

// startCreated is startBox for a box the test created itself (once: the
// lifecycle never creates a box twice).
func startCreated(t *testing.T, rt supervisor.Runtime, b *supervisor.Box, spec shared.Spec) (*supervisor.Started, *shared.Reader) {
	t.Helper()
	ctx := context.Background()
	st, err := rt.Start(ctx, b)
	if err != nil {
		rt.Remove(ctx, b)
		t.Fatalf("start: %v", err)
	}
	w := shared.NewWriter(st.Control)
	w.Send(shared.FrameHello, shared.Hello{Version: shared.ProtocolVersion, Nonce: b.Nonce}.Marshal())
	if err := w.Send(shared.FrameSpec, spec.Marshal()); err != nil {
		t.Fatalf("send spec: %v", err)
	}
	return st, shared.NewReader(st.Control)
}

// readUntil reads frames until the agent printed want on stdout.
// It returns what the agent printed.
func readUntil(t *testing.T, rd *shared.Reader, want string) string {
	t.Helper()
	var out bytes.Buffer
	for !strings.Contains(out.String(), want) {
		f, err := rd.Next()
		if err != nil {
			t.Fatalf("read frame: %v (stdout so far %q)", err, out.String())
		}
		if f.Type == shared.FrameStdout {
			out.Write(f.Payload)
		}
		if f.Type == shared.FrameStderr {
			t.Logf("agent stderr: %s", f.Payload)
		}
		if f.Type == shared.FrameExit {
			x, _ := shared.ParseExit(f.Payload)
			t.Fatalf("box exited (%+v) before printing %q (stdout %q)", x, want, out.String())
		}
	}
	return out.String()
}

// cgroupDirs are the box cgroup's folders as Create recorded them.
func cgroupDirs(t *testing.T, b *supervisor.Box) []string {
	t.Helper()
	g := b.State[native.StateCgroup]
	if g == "" {
		t.Fatalf("box state records no cgroup: %v", b.State)
	}
	root := b.State[native.StateCgroupRoot]
	if b.State[native.StateCgroupVersion] == "2" {
		return []string{filepath.Join(root, g)}
	}
	return []string{filepath.Join(root, "memory", g), filepath.Join(root, "pids", g), filepath.Join(root, "freezer", g)}
}

// cgroupProcs lists the pids in a cgroup folder (and its children).
func cgroupProcs(dir string) ([]string, error) {
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return err
			}
			out = append(out, strings.Fields(string(b))...)
		}
		return nil
	})
	return out, err
}

func readFileTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return strings.TrimSpace(string(b))
}

func lines(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}
