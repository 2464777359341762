package kerneltests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor"
	"deathwatch/supervisor/runtime/docker"
	"deathwatch/supervisor/supervisortest"
)

// The live pipe of a local Podman's one-step run
// (supervisor/runtime/docker/livefd_linux.go): the podman client passes
// the box's PID 1 the read end of a pipe whose write end only the
// supervisor holds, and the watcher takes it as --live-fd.

// podmanPipeScript is the agent of TestPodmanLivePipe: as uid 1000 it
// lists its own descriptors and tries the watcher's, says "checked" and
// sleeps.
const podmanPipeScript = `
echo "own-fds: $(ls /proc/self/fd | tr '\n' ' ')"
if out=$(ls /proc/1/fd 2>&1); then echo "watcher-fds: ok"; else echo "watcher-fds: $out"; fi
echo checked
exec sleep 1000
`

// TestPodmanLivePipe: on rootful and rootless Podman without a service
// the box's watcher runs with --live-fd=3, its descriptor 3 is a pipe,
// and the agent holds none of it (nor can it list the watcher's). With
// conmon stopped (the box's stdin cannot reach EOF) and the heartbeat
// off, SIGKILL of the supervisor ends every box process all the same:
// the pipe alone told the watcher. With conmon let go the engine
// removes the box.
func TestPodmanLivePipe(t *testing.T) {
	for _, r := range rigs(t, "podman", "podman-rootless") {
		t.Run(r.Name, func(t *testing.T) {
			r.Setup(t, "lp")
			t.Cleanup(func() { r.removeLeftovers() })
			cmd, box, rep := reportBox(t, r, nil, podmanPipeScript, "--heartbeat", "0")
			t.Logf("agent's report: %v", rep)
			// ls's own directory descriptor is the one past 0, 1 and 2.
			if fds := strings.Fields(rep["own-fds"]); len(fds) > 4 {
				t.Errorf("the agent holds descriptors %v, want 0, 1, 2 (and ls's own)", fds)
			}
			if v := rep["watcher-fds"]; !strings.Contains(v, "Permission denied") && !strings.Contains(v, "Operation not permitted") {
				t.Errorf("agent lists the watcher's descriptors: %q, want EACCES or EPERM", v)
			}

			procs := r.boxProcs(box, nil)
			if len(procs) < 2 {
				t.Fatalf("box processes %s: want the watcher and the agent", ktest.Describe(procs))
			}
			w := procs[0].PID
			argv, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(w), "cmdline"))
			if err != nil || !strings.Contains(string(argv), "--live-fd=3\x00") {
				t.Errorf("the box's watcher runs %q (%v), want --live-fd=3", strings.ReplaceAll(string(argv), "\x00", " "), err)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join("/proc", strconv.Itoa(w), "fd", "3"), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
				t.Errorf("the watcher's descriptor 3 is mode %o (%v), want a pipe", st.Mode, err)
			}
			killWithConmonStopped(t, r, cmd, procs, box, "the live pipe")
		})
	}
}

// TestPodmanServiceLiveFIFO: through a rootful `podman system service`
// (the API path the supervisor prefers when a socket is there) the box,
// with a user namespace of its own (--userns=auto), gets the live FIFO:
// at started the FIFO is the box's root's (a host id other than root),
// 0600, in the supervisor's 0711 folder; the agent can neither open it
// nor list the folder. With conmon stopped and the heartbeat off,
// SIGKILL of the supervisor ends every box process: the FIFO alone told
// the watcher.
func TestPodmanServiceLiveFIFO(t *testing.T) {
	r := rigs(t, "podman")[0]
	r.Setup(t, "psvclf")
	t.Cleanup(func() { r.removeLeftovers() })
	sock := r.podmanService(t)
	env := []string{"CONTAINER_HOST=unix://" + sock}

	// Stopped after start, before the spec: the FIFO as the box got it.
	os.Remove(r.eventsFile())
	stopped := r.supervisor(append(env, supervisortest.CrashPointEnv+"="+supervisortest.CrashAfterStart), "--", "true")
	if err := stopped.Start(); err != nil {
		t.Fatal(err)
	}
	box := r.waitEvent(supervisor.EventStarted, 120*time.Second).Box
	dir := filepath.Join(r.liveRoot(), box)
	if st, err := os.Lstat(dir); err != nil || st.Mode() != os.ModeDir|0o711 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("live FIFO folder %s: %v (%v), want root's 0711 (the launch was not offered a live FIFO?)", dir, st, err)
	}
	if st, err := os.Lstat(filepath.Join(dir, docker.LiveFIFOName)); err != nil {
		t.Errorf("no live FIFO in %s: %v", dir, err)
	} else if s := st.Sys().(*syscall.Stat_t); st.Mode() != os.ModeNamedPipe|0o600 || s.Uid == 0 || s.Gid == 0 {
		t.Errorf("live FIFO: mode %v uid %d gid %d, want 0600 of the box's root (not the host's)", st.Mode(), s.Uid, s.Gid)
	}
	stopped.Process.Kill()
	stopped.Wait()
	if code, _, stderr := r.reconcile(r.Instance); code != 0 {
		t.Fatalf("reconcile: exit %d: %s", code, stderr)
	}

	cmd, box, rep := reportBox(t, r, env, liveScript(filepath.Dir(r.liveRoot())), "--heartbeat", "0")
	t.Logf("agent's report: %v", rep)
	// The FIFO's name is gone once the watcher holds it (ready), and its
	// folder is a read-only bind: a late try sees no file, or cannot make one.
	for _, what := range []string{"open-read", "open-write", "list-folder", "watcher-fds"} {
		v := strings.ToLower(rep[what])
		if !strings.Contains(v, "permission denied") && !strings.Contains(v, "operation not permitted") && !strings.Contains(v, "no such file") && !strings.Contains(v, "read-only file system") {
			t.Errorf("agent %s: %q, want EACCES, EPERM, ENOENT or EROFS", what, rep[what])
		}
	}
	procs := r.boxProcs(box, nil)
	if len(procs) < 2 {
		t.Fatalf("box processes %s: want the watcher and the agent", ktest.Describe(procs))
	}
	killWithConmonStopped(t, r, cmd, procs, box, "the live FIFO")
	if code, _, stderr := r.reconcile(r.Instance); code != 0 {
		t.Fatalf("reconcile: exit %d: %s", code, stderr)
	}
}

// killWithConmonStopped stops the conmon of the box (procs[0] is its
// watcher), SIGKILLs the supervisor cmd and requires every box process
// dead with the heartbeat off and conmon unable to tell anyone: the
// alarm alone (what) ended the box. Then conmon goes on, and the box must
// be removed.
func killWithConmonStopped(t *testing.T, r *rig, cmd *exec.Cmd, procs []ktest.Proc, box, what string) {
	t.Helper()
	init, err := ktest.ReadStat(procs[0].PID)
	if err != nil {
		t.Fatal(err)
	}
	conmon, err := ktest.ReadStat(init.PPID)
	if err != nil || conmon.Comm != "conmon" {
		t.Fatalf("the box's init %d has parent %+v (%v), want conmon", init.PID, conmon, err)
	}
	if err := syscall.Kill(conmon.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(conmon.PID, syscall.SIGCONT) })
	t0 := time.Now()
	cmd.Process.Kill()
	cmd.Wait()
	took, left := ktest.WaitDead(procs, t0, 4*ktest.Slack)
	if len(left) > 0 {
		t.Fatalf("with conmon stopped, box processes %s still run %v after SIGKILL of the supervisor: %s did not end the box", ktest.Describe(left), took, what)
	}
	t.Logf("%s, conmon stopped: SIGKILL of the supervisor → every box process dead %v (%s)", r.Name, took.Round(time.Millisecond), what)
	syscall.Kill(conmon.PID, syscall.SIGCONT)
	if !ktest.WaitFor(60*time.Second, func() bool { return !r.exists(box) }) {
		t.Fatalf("box %s still there 60s after conmon was let go", box)
	}
}
