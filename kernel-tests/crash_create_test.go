package kerneltests

// The create window: the supervisor is SIGKILLed while the engine
// client's `create` is in flight (local podman: its one `run`, which
// creates and starts the box). The client is the supervisor's child
// and outlives it, so the box can appear after a reconcile has already
// closed the journal entry ("box gone"). The closed entry still proves
// ownership: the next reconcile removes the late box.

import (
	"bufio"
	"deathwatch/supervisor/journal"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor"
	"deathwatch/supervisor/supervisortest"
)

// slowCreate is an engine wrapper that marks and delays `create` and
// `run` (the one-step create).
const slowCreate = `#!/bin/sh
if [ "$1" = create ] || [ "$1" = run ]; then
	: > %[1]q
	sleep 1
fi
exec %[2]q "$@"
`

// wrapEngine puts a shell script in front of the engine's CLI: script
// is a format whose first verb (%[1]q) is arg and whose second is the
// real CLI's path. It returns the PATH that finds it first.
func (r *rig) wrapEngine(t *testing.T, script, arg string) []string {
	t.Helper()
	real := ktest.RequireCmd(t, r.Runtime)
	wrap := filepath.Join(r.Dir, "bin")
	if err := os.Mkdir(wrap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wrap, r.Runtime), []byte(fmt.Sprintf(script, arg, real)), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"PATH=" + wrap + ":" + os.Getenv("PATH")}
}

func TestCrashDuringCreate(t *testing.T) {
	rigs := rigs(t)
	var lines []string
	for _, proto := range rigs {
		if proto.Runtime == "native" {
			continue // native's create runs in the supervisor itself: nothing outlives it
		}
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)
			marker := filepath.Join(r.Dir, "creating")
			env := r.wrapEngine(t, slowCreate, marker)
			var apiCreated <-chan struct{}
			var extra []string
			if r.Runtime == "docker" {
				// Docker goes through its Engine API: the window is a
				// create request in flight, held by a proxy before dockerd.
				upstream := "/var/run/docker.sock"
				if r.User != "" {
					var err error
					if upstream, err = ktest.DockerRootlessSocket(); err != nil {
						t.Fatal(err)
					}
				}
				var sock string
				sock, apiCreated = slowCreateProxy(t, filepath.Join(r.Dir, "engine.sock"), upstream, marker)
				env = append(env, "DOCKER_HOST=unix://"+sock)
				if r.User != "" {
					if err := os.Chown(sock, r.UID, r.GID); err != nil {
						t.Fatal(err)
					}
					// The proxy's listener is root: the supervisor takes
					// the daemon behind it for a rootful one.
					extra = append(extra, "--allow-rootful")
				}
			}

			run := r.start(r.Instance, env, append(extra, "--", "sh", "-c", cwAgent)...)
			if !run.waitFor(60*time.Second, func() bool { _, err := os.Stat(marker); return err == nil }) {
				run.kill()
				t.Fatalf("create never started:\n%s", run.stdout())
			}
			ev := run.event(supervisor.EventJournaled)
			if ev == nil {
				run.kill()
				t.Fatal("no journaled event")
			}
			children := ktest.Descendants(run.cmd.Process.Pid)
			run.kill()

			// The box does not exist yet: the entry is closed as gone.
			code, rep, stderr := r.reconcile(r.Instance)
			first := "unreported"
			for _, it := range rep.Closed {
				if it.LaunchID == ev.LaunchID {
					first = "closed"
				}
			}
			for _, it := range rep.Removed {
				if it.LaunchID == ev.LaunchID {
					first = "removed" // the create won the race
				}
			}
			if code != 0 || first == "unreported" {
				t.Fatalf("first reconcile: exit %d, %+v\n%s", code, rep, stderr)
			}
			// The orphaned client (or request) finishes its create.
			if _, left := ktest.WaitDead(children, time.Now(), 30*time.Second); len(left) > 0 {
				t.Fatalf("the engine client did not finish: %s", ktest.Describe(left))
			}
			if apiCreated != nil {
				select {
				case <-apiCreated:
				case <-time.After(30 * time.Second):
					t.Fatal("the create request never reached dockerd")
				}
			}
			late := r.exists(ev.Box)
			code, rep, stderr = r.reconcile(r.Instance)
			second := "nothing"
			for _, it := range rep.Removed {
				if it.LaunchID == ev.LaunchID {
					second = "removed"
				}
			}
			// A late box from `create` waits for reconcile; one from a
			// one-step `run` starts with its stdin at EOF, so it ends and
			// removes itself, racing reconcile: either may remove it, and
			// it must be gone after (below).
			if code != 0 || len(rep.Blocked) != 0 || (late && second != "removed" && !r.oneStep()) {
				t.Errorf("second reconcile (box there: %v): exit %d, %+v\n%s", late, code, rep, stderr)
			}
			if r.exists(ev.Box) || len(r.boxes(r.Instance)) != 0 {
				t.Errorf("box %s left: %v", ev.Box, r.boxes(r.Instance))
			}
			for _, e := range r.entries(r.Instance) {
				if e.Open() {
					t.Errorf("journal entry %s open (%s)", e.LaunchID, e.State)
				}
			}
			l := fmt.Sprintf("%-16s first reconcile: %s; the late box appeared: %v; second reconcile: %s", r.Name, first, late, second)
			t.Log(l)
			lines = append(lines, l)
		})
	}
	t.Logf("SIGKILL while `create` (local podman: `run`) is in flight:\n%s", strings.Join(lines, "\n"))
}

// TestCrashInRun: local podman's one `podman run` creates the box while
// the journal still says intent. The supervisor is stopped there
// (in-run) until the box's watcher runs (waiting for its hello), then
// the box is frozen (SIGSTOP to its processes: nothing in it can see the
// control stream end) and the supervisor SIGKILLed. Its run client must
// die with it (an orphaned client would go on creating boxes after
// reconcile looked), and reconcile must prove the box ours from the
// intent entry alone (labels, nonce, a dead owner) and remove it.
// (Unfrozen, the box ends at once and podman's --rm removes it.)
func TestCrashInRun(t *testing.T) {
	var lines []string
	forLocalPodman(t, func(t *testing.T, r *rig) {
		run := r.start(r.Instance, []string{supervisortest.CrashPointEnv + "=" + supervisortest.CrashInRun}, "--", "sh", "-c", cwAgent)
		if !run.waitFor(60*time.Second, run.stopped) {
			run.kill()
			t.Fatalf("the supervisor never reached %s:\n%s", supervisortest.CrashInRun, run.stdout())
		}
		ev := run.event(supervisor.EventJournaled)
		if ev == nil {
			run.kill()
			t.Fatal("no journaled event")
		}
		if !run.waitFor(60*time.Second, func() bool { return r.exists(ev.Box) }) {
			run.kill()
			t.Fatalf("podman run never created box %s", ev.Box)
		}
		var entry *journal.Entry
		for _, e := range r.entries(r.Instance) {
			if e.LaunchID == ev.LaunchID {
				entry = e
			}
		}
		if entry == nil || entry.State != journal.StateIntent {
			t.Errorf("journal entry with the box there: %+v, want state %s", entry, journal.StateIntent)
		}
		var procs []ktest.Proc
		if !run.waitFor(60*time.Second, func() bool { procs = r.boxProcs(ev.Box, entry); return len(procs) > 0 }) {
			run.kill()
			t.Fatalf("box %s never ran its watcher", ev.Box)
		}
		children := ktest.Descendants(run.cmd.Process.Pid)
		for _, p := range procs {
			syscall.Kill(p.PID, syscall.SIGSTOP)
		}
		run.kill()
		// The run client dies with its supervisor.
		if _, left := ktest.WaitDead(children, time.Now(), 10*time.Second); len(left) > 0 {
			t.Errorf("the supervisor's children outlived it: %s", ktest.Describe(left))
		}
		// The box stays: frozen, nothing in it saw the stream end.
		there := r.exists(ev.Box)
		runDirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "dw-run-"+ev.Box+"-*"))

		code, rep, stderr := r.reconcile(r.Instance)
		outcome := "unreported"
		for _, it := range rep.Removed {
			if it.LaunchID == ev.LaunchID {
				outcome = "removed: " + it.Reason
			}
		}
		for _, it := range rep.Closed {
			if it.LaunchID == ev.LaunchID {
				outcome = "closed: " + it.Reason
			}
		}
		if !there {
			t.Errorf("box %s gone before reconcile, though frozen", ev.Box)
		}
		if code != 0 || len(rep.Blocked) != 0 || !strings.HasPrefix(outcome, "removed") {
			t.Errorf("reconcile (box there after the kill: %v): exit %d, %s, %+v\n%s", there, code, outcome, rep, stderr)
		}
		if _, left := ktest.WaitDead(procs, time.Now(), 10*time.Second); len(left) > 0 {
			t.Errorf("box processes left: %s", ktest.Describe(left))
		}
		if r.exists(ev.Box) || len(r.boxes(r.Instance)) != 0 {
			t.Errorf("box %s left: %v", ev.Box, r.boxes(r.Instance))
			r.dropBox(ev.Box)
		}
		for _, e := range r.entries(r.Instance) {
			if e.Open() {
				t.Errorf("journal entry %s open (%s)", e.LaunchID, e.State)
			}
		}
		// The run's cidfile folder goes with its box.
		if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "dw-run-"+ev.Box+"-*")); len(left) != 0 {
			t.Errorf("cidfile folder left after reconcile: %v", left)
		}
		l := fmt.Sprintf("%-16s box there after the kill: %v (%d processes, %d cidfile folders); reconcile: %s", r.Name, there, len(procs), len(runDirs), outcome)
		t.Log(l)
		lines = append(lines, l)
	})
	t.Logf("SIGKILL of the supervisor once its `podman run` created the box, the journal at intent, the box frozen:\n%s", strings.Join(lines, "\n"))
}

// slowCreateProxy serves the Engine API at sock, passing every request
// on to upstream; a container create is marked (marker) and held a
// second first, and completes even when its client is gone by then, as
// a request dockerd has already read does. created is closed once
// dockerd answered the create.
func slowCreateProxy(t *testing.T, sock, upstream, marker string) (string, <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	created := make(chan struct{})
	var once sync.Once
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				up, err := net.Dial("unix", upstream)
				if err != nil {
					return
				}
				defer up.Close()
				cr, ur := bufio.NewReader(c), bufio.NewReader(up)
				for {
					req, err := http.ReadRequest(cr)
					if err != nil {
						return
					}
					isCreate := strings.HasSuffix(req.URL.Path, "/containers/create")
					if isCreate {
						os.WriteFile(marker, nil, 0o644)
						time.Sleep(time.Second)
					}
					if err := req.Write(up); err != nil {
						return
					}
					resp, err := http.ReadResponse(ur, req)
					if err != nil {
						return
					}
					if isCreate {
						once.Do(func() { close(created) })
					}
					if err := resp.Write(c); err != nil && !isCreate {
						return
					}
					if resp.StatusCode == http.StatusSwitchingProtocols {
						// The attach: bytes both ways from here on.
						go func() { io.Copy(up, cr); up.(*net.UnixConn).CloseWrite() }()
						io.Copy(c, ur)
						return
					}
				}
			}(c)
		}
	}()
	return sock, created
}
