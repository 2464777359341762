package kerneltests

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/supervisor"
)

// The live FIFO (supervisor/livefifo.go): on rootful local Docker a root
// supervisor holds the write end of a FIFO bind-mounted read-only into
// the box, beside the control stream.

// liveScript is the agent of the live FIFO tests: as uid 1000 it tries
// to open the FIFO for reading and for writing, to list its folder and
// the watcher's descriptors, and to see the host's folder; then it says
// "checked" and sleeps.
const liveScript = `
try() { what=$1; shift; if out=$( ("$@") 2>&1 >/dev/null); then echo "$what: ok"; else echo "$what: $out"; fi; }
try open-read sh -c 'exec 3</dev/.deathwatch/live'
try open-write sh -c 'exec 3>/dev/.deathwatch/live'
try list-folder ls /dev/.deathwatch
try watcher-fds ls /proc/1/fd
try host-folder ls /run/deathwatch
echo checked
exec sleep 1000
`

// liveBox starts the agent in a Docker box, waits for its report and
// returns the running supervisor, the box and the report's lines.
func liveBox(t *testing.T, r *rig) (*exec.Cmd, string, map[string]string) {
	t.Helper()
	os.Remove(r.eventsFile())
	cmd := r.supervisor(nil, "--", "sh", "-c", liveScript)
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
	box := r.waitEvent(supervisor.EventReady, 30*time.Second).Box
	go func() {
		for sc.Scan() {
		}
	}()
	return cmd, box, report
}

// TestEscapeLiveFIFO: the agent can neither open the supervisor's live
// FIFO (for reading or writing: a writer would keep the box alive past
// the supervisor) nor list its folder or the watcher's descriptors, and
// the host's folder is not in the box; on the host it is the
// supervisor's alone.
func TestEscapeLiveFIFO(t *testing.T) {
	forLive(t, func(t *testing.T, r *rig) {
		cmd, box, rep := liveBox(t, r)
		t.Logf("agent's report: %v", rep)
		hostFIFO := filepath.Join(supervisor.LiveRoot, box, supervisor.LiveFIFOName)
		st, err := os.Lstat(hostFIFO)
		if err != nil {
			t.Fatalf("no live FIFO on the host for box %s: %v (the launch was not offered one)", box, err)
		}
		if s := st.Sys().(*syscall.Stat_t); st.Mode() != os.ModeNamedPipe|0o600 || s.Uid != 0 {
			t.Errorf("%s: mode %v uid %d, want a FIFO 0600 of root's", hostFIFO, st.Mode(), s.Uid)
		}
		for _, what := range []string{"open-read", "open-write", "list-folder", "watcher-fds"} {
			if v := rep[what]; !strings.Contains(v, "Permission denied") && !strings.Contains(v, "Operation not permitted") {
				t.Errorf("agent %s: %q, want EACCES or EPERM", what, v)
			}
		}
		if v := rep["host-folder"]; !strings.Contains(v, "No such file") {
			t.Errorf("agent host-folder: %q, want the host's /run/deathwatch absent from the box", v)
		}
		// The box ends as any box does, its folder with it.
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if _, err := os.Lstat(filepath.Dir(hostFIFO)); !os.IsNotExist(err) {
			t.Errorf("the live FIFO folder outlived its box: %v", err)
		}
	})
}

// TestDockerLiveFIFO: SIGKILL of the supervisor kills a box that has a
// live FIFO (the agent dies, the engine removes the box), and reconcile
// removes the FIFO's folder the supervisor could not.
func TestDockerLiveFIFO(t *testing.T) {
	forLive(t, func(t *testing.T, r *rig) {
		cmd, box, _ := liveBox(t, r)
		dir := filepath.Join(supervisor.LiveRoot, box)
		if _, err := os.Lstat(filepath.Join(dir, supervisor.LiveFIFOName)); err != nil {
			t.Fatalf("no live FIFO for box %s: %v", box, err)
		}
		cmd.Process.Kill()
		cmd.Wait()
		if !waitGone(30*time.Second, func() bool { return !r.exists(box) }) {
			t.Fatalf("box %s still there 30s after SIGKILL of its supervisor", box)
		}
		if _, err := os.Lstat(dir); err != nil {
			t.Fatalf("the killed supervisor's live FIFO folder %s is already gone (%v): nothing left for reconcile to prove", dir, err)
		}
		code, rep, stderr := r.reconcile(r.Instance)
		if code != 0 || len(rep.Closed)+len(rep.Removed) != 1 {
			t.Fatalf("reconcile: exit %d, %+v, %s", code, rep, stderr)
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Errorf("reconcile left the live FIFO folder %s: %v", dir, err)
		}
	})
}

// forLive runs f on the rigs that offer a live FIFO (rootful Docker).
func forLive(t *testing.T, f func(t *testing.T, r *rig)) {
	for _, r := range rigs(t, "docker") {
		t.Run(r.Name, func(t *testing.T) {
			r.Setup(t, "lf")
			t.Cleanup(func() { r.removeLeftovers() })
			f(t, r)
		})
	}
}

func waitGone(within time.Duration, gone func() bool) bool {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if gone() {
			return true
		}
	}
	return false
}
