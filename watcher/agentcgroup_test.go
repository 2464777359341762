package watcher

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// The agent forked with LeaveCgroup is let go only after the watcher's
// write to that file (a pipe stands in for cgroup.procs here), and runs
// to its own end; a watcher that cannot leave kills the agent before it
// runs.
func TestLeaveAgentCgroup(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	mark := t.TempDir() + "/ran"
	spawnOne := func(fd int) (int, error) {
		return spawn(&agent{Path: "/bin/sh", Argv: []string{"sh", "-c", "touch " + mark + "; exit 7"},
			Files: []uintptr{0, 1, 2}, LeaveCgroup: fd})
	}
	wait := func(pid int) syscall.WaitStatus {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	pid, err := spawnOne(int(w.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if ws := wait(pid); !ws.Exited() || ws.ExitStatus() != 7 {
		t.Errorf("agent status %v, want exit 7", ws)
	}
	b := make([]byte, 8)
	if n, _ := r.Read(b); string(b[:n]) != "0" {
		t.Errorf("the watcher wrote %q to its cgroup.procs, want \"0\"", b[:n])
	}
	// A file the watcher cannot write: the agent dies before it runs.
	os.Remove(mark)
	pid, err = spawnOne(int(r.Fd()))
	if err == nil || !strings.Contains(err.Error(), "leave the agent's cgroup") {
		t.Errorf("spawn with an unwritable cgroup.procs: %v", err)
	}
	if pid > 0 {
		if ws := wait(pid); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("agent status %v, want SIGKILL", ws)
		}
	}
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("the agent ran although the watcher could not leave its cgroup")
	}
}

// TestMain runs the hold stage when the test binary is started as one
// (spawnHeld forks /proc/self/exe, which is this binary here).
func TestMain(m *testing.M) {
	if HoldRequested(os.Args) {
		os.Exit(HoldMain(os.Args))
	}
	os.Exit(m.Run())
}

// An agent whose exec fails in the hold stage reports the exec's error,
// as ForkExec would, and a missing command is the exit status 127 of
// every runtime.
func TestSpawnHeldExecError(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	pid, err := spawn(&agent{Path: "/nonexistent/agent", Argv: []string{"agent"}, Files: []uintptr{0, 1, 2}, LeaveCgroup: int(w.Fd())})
	if pid != 0 || err != syscall.ENOENT {
		t.Errorf("spawn of a missing agent held: pid %d, %v; want 0, ENOENT", pid, err)
	}
	if got := execStatus(err); got != 127 {
		t.Errorf("execStatus = %d, want 127", got)
	}
}
