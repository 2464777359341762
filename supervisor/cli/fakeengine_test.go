//go:build linux

package cli

// A fake docker/podman at the process seam: the test binary itself,
// reached through symlinks named docker and podman first on PATH. It
// records every argv (calls.log, one JSON array a line), keeps boxes as
// files, and plays the watcher's half of the control stream on
// `start --attach --interactive`, driven by scenario.json.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/shared"
)

// fakeScenario says how the fake engine behaves.
type fakeScenario struct {
	InfoFail   string `json:"info_fail,omitempty"`   // stderr of a failing `info` (daemon down)
	Rootless   bool   `json:"rootless,omitempty"`    // report a rootless engine
	NoImage    bool   `json:"no_image,omitempty"`    // `image inspect` says no such image
	NoImageIn  string `json:"no_image_in,omitempty"` // the same for one engine kind alone
	CreateFail string `json:"create_fail,omitempty"` // stderr of a failing `create`
	NoRemove   bool   `json:"no_remove,omitempty"`   // boxes are not auto-removed when start ends
	// RmInProgress: `rm` answers "removal ... already in progress" (the
	// engine's auto-remove got there first) and the box is gone after.
	RmInProgress bool `json:"rm_in_progress,omitempty"`
	// RunRmFail: `podman run`'s --rm fails: the box is left, and the
	// client prints this on stderr after the box ended.
	RunRmFail string `json:"run_rm_fail,omitempty"`
	// StartFail: `start` prints this and exits 125 before any frame (the
	// engine could not start the box).
	StartFail string `json:"start_fail,omitempty"`
	// Agent: "exit:N" (exits with N), "exec-fail" (127, setup-failed),
	// "sleep" (until stop → 143, or EOF → 245), "ignore-stop" (until EOF),
	// "deadline" (exit record with reason deadline).
	Agent  string `json:"agent"`
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
}

func fakeMain(kind string, args []string) int {
	// Like a real engine, survive a reader that went away.
	signal.Ignore(syscall.SIGPIPE)
	dir := os.Getenv("FAKE_ENGINE_STATE")
	if dir == "" {
		fmt.Fprintln(os.Stderr, "fake engine: FAKE_ENGINE_STATE is not set")
		return 2
	}
	f, err := os.OpenFile(filepath.Join(dir, "calls.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err == nil {
		b, _ := json.Marshal(append([]string{kind}, args...))
		f.Write(append(b, '\n'))
		f.Close()
	}
	var sc fakeScenario
	if b, err := os.ReadFile(filepath.Join(dir, "scenario.json")); err == nil {
		json.Unmarshal(b, &sc)
	}
	if sc.NoImageIn == kind {
		sc.NoImage = true
	}
	boxes := filepath.Join(dir, "boxes-"+kind) // each engine its own store
	os.MkdirAll(boxes, 0o700)
	last := ""
	if len(args) > 0 {
		last = args[len(args)-1]
	}
	noSuch := func(name string) int {
		if kind == "podman" {
			fmt.Fprintf(os.Stderr, "Error: no container with name or ID %q found: no such container\n", name)
		} else {
			fmt.Fprintf(os.Stderr, "Error response from daemon: No such container: %s\n", name)
		}
		return 1
	}
	switch {
	case len(args) == 0:
		return 2
	case args[0] == "info":
		if sc.InfoFail != "" {
			fmt.Fprintln(os.Stderr, sc.InfoFail)
			return 1
		}
		if kind == "podman" {
			fmt.Printf("4.3.1|%v\n", sc.Rootless)
		} else if sc.Rootless {
			fmt.Println(`20.10.24|["name=seccomp,profile=default","name=rootless"]`)
		} else {
			fmt.Println(`20.10.24|["name=seccomp,profile=default"]`)
		}
		return 0
	case args[0] == "version":
		if sc.InfoFail != "" {
			fmt.Fprintln(os.Stderr, sc.InfoFail)
			return 1
		}
		fmt.Println("4.3.1")
		return 0
	case args[0] == "image" && args[1] == "exists" && kind == "podman":
		if sc.NoImage {
			return 1
		}
		return 0
	case args[0] == "image" && args[1] == "inspect":
		if sc.NoImage {
			fmt.Fprintf(os.Stderr, "Error: No such image: %s\n", last)
			return 1
		}
		fmt.Println("sha256:0123")
		return 0
	case args[0] == "create":
		if sc.CreateFail != "" {
			fmt.Fprintln(os.Stderr, sc.CreateFail)
			return 125
		}
		fakeCreate(boxes, args)
		fmt.Println("0123456789abcdef")
		return 0
	case args[0] == "start":
		name := last
		if _, err := os.Stat(filepath.Join(boxes, name)); err != nil {
			return noSuch(name)
		}
		return fakeStart(dir, boxes, name, sc)
	case args[0] == "run" && args[1] == "--cidfile":
		// podman run: the image first (nothing created without it), the
		// create, the cidfile, then the start.
		if sc.NoImage {
			fmt.Fprintf(os.Stderr, "Error: %s: image not known\n", args[slices.Index(args, "--")+1])
			return 125
		}
		if sc.CreateFail != "" {
			fmt.Fprintln(os.Stderr, sc.CreateFail)
			return 125
		}
		name := fakeCreate(boxes, args)
		os.WriteFile(args[2], []byte("0123456789abcdef"), 0o644)
		code := fakeStart(dir, boxes, name, sc)
		if sc.RunRmFail != "" {
			fmt.Fprintln(os.Stderr, sc.RunRmFail)
		}
		return code
	case args[0] == "rm":
		p := filepath.Join(boxes, last)
		if _, err := os.Stat(p); err != nil {
			return noSuch(last)
		}
		os.Remove(p)
		if sc.RmInProgress {
			fmt.Fprintf(os.Stderr, "Error response from daemon: removal of container %s is already in progress\n", last)
			return 1
		}
		return 0
	case args[0] == "container" && args[1] == "inspect":
		if _, err := os.Stat(filepath.Join(boxes, last)); err != nil {
			return noSuch(last)
		}
		fmt.Println("0123456789abcdef")
		return 0
	case args[0] == "ps" && slices.Contains(args, "{{.Names}}"):
		// namedArgs: the boxes whose name contains the filter's.
		filter := ""
		for j, a := range args {
			if a == "--filter" {
				filter, _ = strings.CutPrefix(args[j+1], "name=")
			}
		}
		des, _ := os.ReadDir(boxes)
		for _, de := range des {
			if strings.Contains(de.Name(), filter) {
				fmt.Println(de.Name())
			}
		}
		return 0
	case args[0] == "ps":
		des, _ := os.ReadDir(boxes)
		var rows []map[string]any
		for _, de := range des {
			b, _ := os.ReadFile(filepath.Join(boxes, de.Name()))
			var labels map[string]string
			json.Unmarshal(b, &labels)
			if kind == "podman" {
				rows = append(rows, map[string]any{"Names": []string{de.Name()}, "Labels": labels, "State": "running"})
			} else {
				var kv []string
				for k, v := range labels {
					kv = append(kv, k+"="+v)
				}
				// docker ps's format reads the deathwatch labels by key.
				dw := map[string]string{}
				for k, v := range labels {
					if strings.HasPrefix(k, "io.deathwatch.") {
						dw[k] = v
					}
				}
				b, _ := json.Marshal(map[string]any{"Names": de.Name(), "Labels": strings.Join(kv, ","), "State": "running", "DW": dw})
				fmt.Println(string(b))
			}
		}
		if kind == "podman" {
			b, _ := json.Marshal(rows)
			fmt.Println(string(b))
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "fake engine: unknown command %q\n", args)
	return 2
}

// fakeCreate keeps a box (its labels) named by --name, and returns its name.
func fakeCreate(boxes string, args []string) string {
	i := slices.Index(args, "--name")
	labels := map[string]string{}
	for j, a := range args {
		if a == "--label" {
			k, v, _ := strings.Cut(args[j+1], "=")
			labels[k] = v
		}
	}
	b, _ := json.Marshal(labels)
	os.WriteFile(filepath.Join(boxes, args[i+1]), b, 0o600)
	return args[i+1]
}

// fakeStart runs the box attached and auto-removes it. The box is a
// process of its own, as an engine's is (not the client, nor in its
// process group): the client relays its stdin to the box, so that the
// client's death ends the box's stdin, as a real engine's attach does.
func fakeStart(dir, boxes, name string, sc fakeScenario) int {
	if sc.StartFail != "" {
		fmt.Fprintln(os.Stderr, sc.StartFail)
		return 125
	}
	box := exec.Command(os.Args[0])
	box.Env = append(os.Environ(), fakeBoxEnv+"="+name)
	box.Stdout, box.Stderr = os.Stdout, os.Stderr
	box.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	in, err := box.StdinPipe()
	if err == nil {
		err = box.Start()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake engine: start box %s: %v\n", name, err)
		return 125
	}
	go func() { io.Copy(in, os.Stdin); in.Close() }()
	box.Wait()
	return box.ProcessState.ExitCode()
}

// fakeBoxEnv names the box a fake engine process runs (fakeBox).
const fakeBoxEnv = "FAKE_ENGINE_BOX"

// fakeBox is the box: the fake watcher on stdin/stdout, then the
// engine's auto-remove.
func fakeBox(kind, name string) int {
	signal.Ignore(syscall.SIGPIPE) // an engine's box outlives its reader too
	dir := os.Getenv("FAKE_ENGINE_STATE")
	var sc fakeScenario
	if b, err := os.ReadFile(filepath.Join(dir, "scenario.json")); err == nil {
		json.Unmarshal(b, &sc)
	}
	boxes := filepath.Join(dir, "boxes-"+kind)
	code := fakeWatcher(dir, sc)
	if !sc.NoRemove && !sc.RmInProgress && sc.RunRmFail == "" {
		os.Remove(filepath.Join(boxes, name))
	}
	return code
}

// fakeWatcher speaks the box side of the control stream on stdin/stdout.
func fakeWatcher(dir string, sc fakeScenario) int {
	r := shared.NewReader(os.Stdin)
	w := shared.NewWriter(os.Stdout)
	send := func(x shared.Exit) int {
		w.Send(shared.FrameExit, x.Marshal())
		return x.Code
	}
	f, err := r.Next()
	if err != nil || f.Type != shared.FrameHello {
		fmt.Fprintf(os.Stderr, "watcher: no hello: %v\n", err)
		return shared.ExitLivenessLost
	}
	h, _ := shared.ParseHello(f.Payload)
	os.WriteFile(filepath.Join(dir, "nonce"), []byte(h.Nonce), 0o600)
	f, err = r.Next()
	if err != nil || f.Type != shared.FrameSpec {
		fmt.Fprintf(os.Stderr, "watcher: no spec: %v\n", err)
		return shared.ExitLivenessLost
	}
	spec, err := shared.ParseSpec(f.Payload)
	if err != nil {
		return send(shared.Exit{Reason: shared.ReasonSetupFailed, Code: shared.ExitSetupFailed, Message: err.Error()})
	}
	// The agent's environment, as the agent would see it.
	os.WriteFile(filepath.Join(dir, "agent-env"), []byte(strings.Join(spec.Env, "\n")), 0o600)
	os.WriteFile(filepath.Join(dir, "agent-argv"), []byte(strings.Join(spec.Argv, "\n")), 0o600)
	os.WriteFile(filepath.Join(dir, "agent-input"), fmt.Appendf(nil, "tty=%v stdin=%v rows=%d cols=%d", spec.TTY, spec.Stdin, spec.Rows, spec.Cols), 0o600)
	if sc.Agent == "exec-fail" {
		fmt.Fprintf(os.Stderr, "watcher: start %s: not found\n", spec.Argv[0])
		return send(shared.Exit{Reason: shared.ReasonSetupFailed, Code: shared.ExitNotFound, Message: "start " + spec.Argv[0] + ": not found"})
	}
	w.Send(shared.FrameReady, shared.Ready{PID: 2, Started: time.Now()}.Marshal())
	if sc.Stdout != "" {
		w.Send(shared.FrameStdout, []byte(sc.Stdout))
	}
	if sc.Stderr != "" {
		w.Send(shared.FrameStderr, []byte(sc.Stderr))
	}
	os.WriteFile(filepath.Join(dir, "running"), nil, 0o600)
	switch {
	case strings.HasPrefix(sc.Agent, "exit:"):
		n, _ := strconv.Atoi(strings.TrimPrefix(sc.Agent, "exit:"))
		reason := shared.ReasonExited
		if n > 128 {
			reason = shared.ReasonSignaled
		}
		return send(shared.Exit{Reason: reason, Code: n})
	case sc.Agent == "vanish":
		// The stream ends with no exit record (the box died under us).
		return 137
	case sc.Agent == "deadline":
		return send(shared.Exit{Reason: shared.ReasonDeadline, Code: shared.ExitDeadline})
	case sc.Agent == "echo-stdin":
		return send(fakeEcho(dir, spec, r, w))
	}
	// sleep / ignore-stop: wait for stop or EOF.
	for {
		f, err := r.Next()
		if err != nil {
			os.WriteFile(filepath.Join(dir, "liveness-lost"), nil, 0o600)
			return send(shared.Exit{Reason: shared.ReasonLivenessLost, Code: shared.ExitLivenessLost})
		}
		switch f.Type {
		case shared.FramePing:
			os.WriteFile(filepath.Join(dir, "pinged"), nil, 0o600)
			w.Send(shared.FramePong, f.Payload)
		case shared.FrameSignal:
			sig, _ := shared.ParseSignal(f.Payload)
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("signal-%d", sig.Number)), nil, 0o600)
		case shared.FrameStop:
			os.WriteFile(filepath.Join(dir, "stop"), nil, 0o600)
			if sc.Agent != "ignore-stop" {
				return send(shared.Exit{Reason: shared.ReasonStopped, Code: shared.SignalStatus(15), Signal: 15})
			}
		}
	}
}

// fakeEngine is a fake docker and podman first on PATH for one test.
type fakeEngine struct {
	t     *testing.T
	dir   string // state
	bin   string // PATH entry
	self  string // the test binary
	super string // the test binary as `supervisor`
}

func newFakeEngine(t *testing.T, sc fakeScenario) *fakeEngine {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fe := &fakeEngine{t: t, dir: t.TempDir(), bin: t.TempDir(), self: self}
	for _, n := range []string{"docker", "podman", "supervisor"} {
		if err := os.Symlink(self, filepath.Join(fe.bin, n)); err != nil {
			t.Fatal(err)
		}
	}
	// A stand-in watcher binary: exec only checks that it exists.
	if err := os.WriteFile(filepath.Join(fe.bin, "watcher"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fe.super = filepath.Join(fe.bin, "supervisor")
	fe.setScenario(sc)
	t.Setenv("FAKE_ENGINE_STATE", fe.dir)
	t.Setenv("PATH", fe.bin+":"+os.Getenv("PATH"))
	// The fake is a CLI: the engine API it would be asked first answers
	// nowhere (the runtime then falls back to the CLI, as on an ssh://
	// context), and no podman service socket is used.
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(fe.dir, "no-engine.sock"))
	t.Setenv("CONTAINER_HOST", "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	return fe
}

func (fe *fakeEngine) setScenario(sc fakeScenario) {
	b, _ := json.Marshal(sc)
	if err := os.WriteFile(filepath.Join(fe.dir, "scenario.json"), b, 0o600); err != nil {
		fe.t.Fatal(err)
	}
}

// calls returns the recorded argvs (engine name first).
//
// A listing of a box this engine never made is left out: it is a root
// supervisor's host id slot allocation asking whether the box of a
// stale slot (another test's SIGKILLed supervisor, in the host-wide slot
// folder) still exists, which depends on what ran before, not on the
// launch under test.
func (fe *fakeEngine) calls() [][]string {
	b, _ := os.ReadFile(filepath.Join(fe.dir, "calls.log"))
	var all [][]string
	made := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var a []string
		json.Unmarshal([]byte(line), &a)
		all = append(all, a)
		if i := slices.Index(a, "--name"); i > 0 && i+1 < len(a) && len(a) > 1 && (a[1] == "create" || a[1] == "run") {
			made[a[i+1]] = true
		}
	}
	var out [][]string
	for _, a := range all {
		if box, ok := listedName(a); ok && !made[box] {
			continue
		}
		out = append(out, a)
	}
	return out
}

// listedName is the box name a `ps --filter name=BOX` call asks after.
func listedName(a []string) (string, bool) {
	if len(a) < 2 || a[1] != "ps" {
		return "", false
	}
	for i, w := range a {
		if w == "--filter" && i+1 < len(a) && strings.HasPrefix(a[i+1], "name=") {
			return strings.TrimPrefix(a[i+1], "name="), true
		}
	}
	return "", false
}

// boxes lists the boxes that exist.
func (fe *fakeEngine) boxes() []string {
	var n []string
	for _, kind := range []string{"docker", "podman"} {
		des, _ := os.ReadDir(filepath.Join(fe.dir, "boxes-"+kind))
		for _, d := range des {
			n = append(n, d.Name())
		}
	}
	return n
}

func (fe *fakeEngine) file(name string) string {
	b, _ := os.ReadFile(filepath.Join(fe.dir, name))
	return string(b)
}

func (fe *fakeEngine) exists(name string) bool {
	_, err := os.Stat(filepath.Join(fe.dir, name))
	return err == nil
}

func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "docker", "podman":
		if name := os.Getenv(fakeBoxEnv); name != "" {
			os.Exit(fakeBox(filepath.Base(os.Args[0]), name))
		}
		os.Exit(fakeMain(filepath.Base(os.Args[0]), os.Args[1:]))
	case "supervisor":
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}
