package kerneltests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor"
	"deathwatch/supervisor/runtime/docker"
	"deathwatch/supervisor/supervisortest"
)

// The live FIFO (supervisor/livefifo.go): on local Docker whose daemon
// runs as the supervisor's uid (rootful Docker for a root supervisor,
// the user's rootless Docker for the user) the supervisor holds the
// write end of a FIFO bind-mounted read-only into the box, beside the
// control stream.

// liveScript is the agent of the live FIFO tests: as uid 1000 it tries
// to open the FIFO for reading and for writing, to list its folder and
// the watcher's descriptors, and to see the host's folder hostDir; then
// it says "checked" and sleeps.
func liveScript(hostDir string) string {
	return `
try() { what=$1; shift; if out=$( ("$@") 2>&1 >/dev/null); then echo "$what: ok"; else echo "$what: $out"; fi; }
try open-read sh -c 'exec 3</dev/.deathwatch/live'
try open-write sh -c 'exec 3>/dev/.deathwatch/live'
try list-folder ls /dev/.deathwatch
try watcher-fds ls /proc/1/fd
try host-folder ls ` + hostDir + `
echo checked
exec sleep 1000
`
}

// liveRoot is the host folder of the rig's supervisor's live FIFOs'
// folders: /run's as root, below the user's runtime folder for a user.
func (r *rig) liveRoot() string {
	r.T.Helper()
	if r.User == "" {
		return docker.LiveRoot
	}
	dir, err := ktest.RuntimeDir(r.User)
	if err != nil {
		r.T.Fatal(err)
	}
	return docker.LiveRootFor(r.UID, dir)
}

// liveBox starts the agent in a Docker box with the exec flags extra,
// waits for its report and returns the running supervisor, the box and
// the report's lines.
func liveBox(t *testing.T, r *rig, extra ...string) (*exec.Cmd, string, map[string]string) {
	t.Helper()
	return reportBox(t, r, nil, liveScript(filepath.Dir(r.liveRoot())), extra...)
}

// reportBox starts `sh -c script` in a box of rig r (supervisor env and
// exec flags extra), reads the agent's "key: value" report up to its
// "checked" line, waits for the box's ready event and returns the
// running supervisor, the box and the report.
func reportBox(t *testing.T, r *rig, env []string, script string, extra ...string) (*exec.Cmd, string, map[string]string) {
	t.Helper()
	os.Remove(r.eventsFile())
	cmd := r.supervisor(env, append(extra, "--", "sh", "-c", script)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	report := map[string]string{}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "checked" {
		if k, v, ok := strings.Cut(sc.Text(), ": "); ok {
			report[k] = v
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	box := r.waitEvent(supervisor.EventReady, 60*time.Second).Box
	return cmd, box, report
}

// TestEscapeLiveFIFO: the agent can neither open the supervisor's live
// FIFO (for reading or writing: a writer would keep the box alive past
// the supervisor) nor list its folder or the watcher's descriptors, and
// the host's folder is not in the box; on the host the folder is the
// supervisor's uid's alone (root's, or the rootless daemon's user's),
// the FIFO is gone once the watcher holds it
// (ready), and the folder, the box's bind source, stays empty until the
// box is removed: docker cp of the running box works.
func TestEscapeLiveFIFO(t *testing.T) {
	forLive(t, func(t *testing.T, r *rig) {
		// Stopped after start, before the spec: the folder as the box got it.
		stopped := r.supervisor([]string{supervisortest.CrashPointEnv + "=" + supervisortest.CrashAfterStart}, "--", "true")
		if err := stopped.Start(); err != nil {
			t.Fatal(err)
		}
		box := r.waitEvent(supervisor.EventStarted, 30*time.Second).Box
		dir := filepath.Join(r.liveRoot(), box)
		for p, want := range map[string]os.FileMode{dir: os.ModeDir | 0o700, filepath.Join(dir, docker.LiveFIFOName): os.ModeNamedPipe | 0o600} {
			if st, err := os.Lstat(p); err != nil {
				t.Errorf("no %s on the host (the launch was not offered a live FIFO): %v", p, err)
			} else if s := st.Sys().(*syscall.Stat_t); st.Mode() != want || int(s.Uid) != r.UID {
				t.Errorf("%s: mode %v uid %d, want %v of uid %d's", p, st.Mode(), s.Uid, want, r.UID)
			}
		}
		stopped.Process.Kill()
		stopped.Wait()
		if code, _, stderr := r.reconcile(r.Instance); code != 0 {
			t.Fatalf("reconcile: exit %d: %s", code, stderr)
		}

		cmd, box, rep := liveBox(t, r)
		t.Logf("agent's report: %v", rep)
		for _, what := range []string{"open-read", "open-write", "list-folder", "watcher-fds"} {
			if v := rep[what]; !strings.Contains(v, "Permission denied") && !strings.Contains(v, "Operation not permitted") {
				t.Errorf("agent %s: %q, want EACCES or EPERM", what, v)
			}
		}
		if v := rep["host-folder"]; !strings.Contains(v, "No such file") {
			t.Errorf("agent host-folder: %q, want the host's %s absent from the box", v, filepath.Dir(r.liveRoot()))
		}
		dir = filepath.Join(r.liveRoot(), box)
		if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
			t.Errorf("after ready the live FIFO folder holds %v (%v), want it there and empty", ents, err)
		}
		if st, err := os.Lstat(dir); err != nil || st.Mode() != os.ModeDir|0o700 || int(st.Sys().(*syscall.Stat_t).Uid) != r.UID {
			t.Errorf("after ready the live FIFO folder is %v (%v), want uid %d's 0700", st, err, r.UID)
		}
		if out, err := r.Engine("cp", box+":/etc/passwd", "-").CombinedOutput(); err != nil {
			t.Errorf("docker cp from the running box: %v\n%s", err, out)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("the live FIFO folder is still on the host after the launch: %v", err)
		}
	})
}

// TestDockerLiveFIFO: SIGKILL of the supervisor kills a box that has a
// live FIFO (the agent dies, the engine removes the box); a supervisor
// killed before ready leaves the FIFO's folder, and reconcile removes it.
func TestDockerLiveFIFO(t *testing.T) {
	forLive(t, func(t *testing.T, r *rig) {
		cmd, box, _ := liveBox(t, r)
		cmd.Process.Kill()
		cmd.Wait()
		if !ktest.WaitFor(30*time.Second, func() bool { return !r.exists(box) }) {
			t.Fatalf("box %s still there 30s after SIGKILL of its supervisor", box)
		}
		for _, point := range []string{supervisortest.CrashAfterCreate, supervisortest.CrashAfterStart} {
			os.Remove(r.eventsFile())
			stopped := r.supervisor([]string{supervisortest.CrashPointEnv + "=" + point}, "--", "true")
			if err := stopped.Start(); err != nil {
				t.Fatal(err)
			}
			box := r.waitEvent(supervisor.EventCreated, 30*time.Second).Box
			dir := filepath.Join(r.liveRoot(), box)
			if !ktest.WaitFor(30*time.Second, func() bool { _, err := os.Lstat(dir); return err == nil }) {
				t.Fatalf("%s: no live FIFO folder %s", point, dir)
			}
			if !ktest.WaitFor(30*time.Second, func() bool { return ktest.Stopped(stopped.Process.Pid) }) {
				t.Fatalf("%s: the supervisor never stopped at the point", point)
			}
			stopped.Process.Kill()
			stopped.Wait()
			if code, rep, stderr := r.reconcile(r.Instance); code != 0 || len(rep.Closed)+len(rep.Removed) == 0 {
				t.Fatalf("%s: reconcile: exit %d, %+v, %s", point, code, rep, stderr)
			}
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Errorf("%s: reconcile left the live FIFO folder %s: %v", point, dir, err)
			}
		}
	})
}

// TestLiveFIFOAlone: the live FIFO ends the box by itself. The engine's
// path to the box is frozen (the box's containerd-shim stopped: the
// box's stdin cannot reach EOF) and the heartbeat is off, so when the
// supervisor is SIGKILLed only the FIFO's end can tell the watcher: the
// agent dies all the same. With the shim let go the engine removes the
// box; the FIFO was gone from the host since ready, and reconcile
// removes its folder, the killed supervisor's one leftover.
func TestLiveFIFOAlone(t *testing.T) {
	forLive(t, func(t *testing.T, r *rig) {
		cmd, box, _ := liveBox(t, r, "--heartbeat", "0")
		procs := r.boxProcs(box, nil)
		if len(procs) < 2 {
			t.Fatalf("box processes %s: want the watcher and the agent", ktest.Describe(procs))
		}
		init, err := ktest.ReadStat(procs[0].PID)
		if err != nil {
			t.Fatal(err)
		}
		shim, err := ktest.ReadStat(init.PPID)
		if err != nil || !strings.HasPrefix(shim.Comm, "containerd-shim") {
			t.Fatalf("the box's init %d has parent %+v (%v), want its containerd-shim", init.PID, shim, err)
		}
		if err := syscall.Kill(shim.PID, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(shim.PID, syscall.SIGCONT) })
		dir := filepath.Join(r.liveRoot(), box)
		if _, err := os.Lstat(filepath.Join(dir, docker.LiveFIFOName)); !os.IsNotExist(err) {
			t.Errorf("the live FIFO is still on the host after ready: %v", err)
		}

		t0 := time.Now()
		cmd.Process.Kill()
		cmd.Wait()
		took, left := ktest.WaitDead(procs, t0, 4*ktest.Slack)
		if len(left) > 0 {
			t.Fatalf("with the engine's path frozen, box processes %s still run %v after SIGKILL of the supervisor: the live FIFO did not end the box", ktest.Describe(left), took)
		}
		t.Logf("%s, engine's path frozen: SIGKILL of the supervisor → every box process dead %v", r.Name, took.Round(time.Millisecond))

		syscall.Kill(shim.PID, syscall.SIGCONT)
		if !ktest.WaitFor(30*time.Second, func() bool { return !r.exists(box) }) {
			t.Fatalf("box %s still there 30s after its shim was let go", box)
		}
		if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
			t.Errorf("after the box the killed supervisor's live FIFO folder holds %v (%v), want it there and empty", ents, err)
		}
		if code, rep, stderr := r.reconcile(r.Instance); code != 0 || len(rep.Closed) == 0 {
			t.Fatalf("reconcile: exit %d, %+v, %s", code, rep, stderr)
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("reconcile left the live FIFO folder %s: %v", dir, err)
		}
	})
}

// forLive runs f on the rigs that offer a live FIFO (Docker, rootful
// and rootless).
func forLive(t *testing.T, f func(t *testing.T, r *rig)) {
	for _, r := range rigs(t, "docker", "docker-rootless") {
		t.Run(r.Name, func(t *testing.T) {
			r.Setup(t, "lf")
			t.Cleanup(func() { r.removeLeftovers() })
			f(t, r)
		})
	}
}

// TestLibraryLiveFIFO: a Go controller's supervisor.Exec on local
// rootful Docker with no ExecIO.ProveBind (the library's default, no
// CLI) offers the box a live FIFO: when the box has started, its FIFO
// is on the host, root's 0600 in root's 0700 folder.
func TestLibraryLiveFIFO(t *testing.T) {
	for _, r := range rigs(t, "docker") {
		r.Setup(t, "lf")
		t.Cleanup(func() { r.removeLeftovers() })
		var seen []string
		res, err := supervisor.Exec(context.Background(), supervisor.ExecOptions{
			Instance: r.Instance, JournalDir: r.JournalDir(), Runtime: r.Runtime, Image: r.Image,
			AllowRootful: true, WatcherPath: r.Bin.Watcher, Deadline: 60 * time.Second,
			Argv: []string{"true"},
			IO: supervisor.ExecIO{OnEvent: func(ev supervisor.Event) {
				if ev.Event != supervisor.EventStarted {
					return
				}
				dir := filepath.Join(r.liveRoot(), ev.Box)
				for p, want := range map[string]os.FileMode{dir: os.ModeDir | 0o700, filepath.Join(dir, docker.LiveFIFOName): os.ModeNamedPipe | 0o600} {
					if st, err := os.Lstat(p); err != nil {
						seen = append(seen, fmt.Sprintf("no %s on the host: %v", p, err))
					} else if s := st.Sys().(*syscall.Stat_t); st.Mode() != want || s.Uid != 0 {
						seen = append(seen, fmt.Sprintf("%s: mode %v uid %d, want %v of root's", p, st.Mode(), s.Uid, want))
					} else {
						seen = append(seen, "ok "+p)
					}
				}
			}},
		})
		if err != nil || res.Code != 0 {
			t.Fatalf("Exec: exit %d, %v", res.Code, err)
		}
		t.Logf("at started: %v", seen)
		if len(seen) != 2 || !strings.HasPrefix(seen[0], "ok ") || !strings.HasPrefix(seen[1], "ok ") {
			t.Errorf("the library's launch was not offered a live FIFO: %v", seen)
		}
	}
}
