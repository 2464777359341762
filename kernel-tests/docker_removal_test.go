package kerneltests

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/kernel-tests/ktest/immutable"
	"deathwatch/supervisor"
	"deathwatch/supervisor/supervisortest"
)

// TestDockerAutoRemoveFailed: dockerd's own removal of a box fails (here
// a file of the box's folder is made immutable, so its unlink fails
// with EPERM; in the wild a busy mount does it), and the box stays,
// dead. dockerd still answers the removal wait, with the failure in the
// answer. exec must not take that for a removal: it removes the box
// itself, and the box is gone when exec returns.
func TestDockerAutoRemoveFailed(t *testing.T) {
	for _, proto := range rigs(t, "docker") {
		r := *proto
		r.setup(t)
		cmd := r.supervisor(nil, "--", "sleep", "3")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		box := r.waitEvent("started", 60*time.Second).Box
		t.Cleanup(func() { r.Engine("rm", "--force", box).Run() })
		id, err := r.Engine("container", "inspect", "--format", "{{.Id}}", box).Output()
		if err != nil {
			t.Fatalf("inspect %s: %v", box, err)
		}
		root, err := r.Engine("info", "--format", "{{.DockerRootDir}}").Output()
		if err != nil {
			t.Fatalf("docker info: %v", err)
		}
		unpin := pinFile(t, filepath.Join(strings.TrimSpace(string(root)), "containers", strings.TrimSpace(string(id)), "hostname"))
		t.Cleanup(unpin)
		// dockerd's removal failed: it says so in the box's state.
		var state string
		if !ktest.WaitFor(60*time.Second, func() bool {
			out, _ := r.Engine("container", "inspect", "--format", "{{.State.Error}}", box).Output()
			state = strings.TrimSpace(string(out))
			return state != ""
		}) {
			t.Fatalf("dockerd's removal of %s did not fail (state error %q); stderr: %s", box, state, stderr.String())
		}
		t.Logf("dockerd: %s", state)
		unpin()
		err = cmd.Wait()
		if err != nil {
			t.Errorf("exec: %v; stderr: %s", err, stderr.String())
		}
		if r.exists(box) {
			t.Errorf("box %s is still there after exec returned: dockerd's failed removal was taken for one", box)
		}
		for _, ev := range r.events() {
			if ev.Event == supervisor.EventRemoved && ev.Error != "" {
				t.Errorf("removed event with error %q", ev.Error)
			}
		}
		r.assertClean()
	}
}

// pinFile makes path immutable (nobody, root included, can unlink it)
// and returns what undoes it, once.
func pinFile(t *testing.T, path string) func() {
	t.Helper()
	set := func(on bool) error { return immutable.Set(path, on) }
	if err := set(true); err != nil {
		t.Fatalf("make %s immutable (the file system must support it): %v", path, err)
	}
	done := false
	return func() {
		if !done {
			done = true
			if err := set(false); err != nil {
				t.Errorf("make %s mutable again: %v", path, err)
			}
		}
	}
}

// TestReconcileProbeBox: a supervisor killed while its --stage auto
// probe box runs (stopped at the probe launch's after-start, the first
// launch of the run) leaves that box's journal entry (and, should the
// engine not remove it, the box) under INSTANCE.doctor; `reconcile
// --instance INSTANCE` is what a controller runs, and it closes or
// removes them.
func TestReconcileProbeBox(t *testing.T) {
	for _, proto := range rigs(t, "docker") {
		r := *proto
		r.setup(t)
		probe := supervisortest.ProbeInstance(r.Instance)
		t.Cleanup(func() {
			for _, b := range r.boxes(probe) {
				t.Errorf("probe box %s left", b)
				r.Engine("rm", "--force", b).Run()
			}
		})
		src := filepath.Join(r.Dir, "src")
		os.MkdirAll(src, 0o755)
		os.WriteFile(filepath.Join(src, "f"), []byte("x\n"), 0o644)
		p := r.stoppedAt(t, supervisortest.CrashAfterStart, "--stage", "auto", "--copy-in", src+":/tmp/src", "--", "true")
		if len(r.boxes(probe)) == 0 {
			t.Errorf("stopped, but no box of %s runs", probe)
		}
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
		open := 0
		for _, e := range r.entries(probe) {
			if e.Open() {
				open++
			}
		}
		if open == 0 {
			t.Fatalf("the probe ended before the kill: its entry is closed, nothing left to reconcile")
		}
		code, rep, rstderr := r.reconcile(r.Instance)
		t.Logf("reconcile: exit %d %+v", code, rep)
		if code != 0 || len(rep.Removed)+len(rep.Closed) == 0 {
			t.Errorf("reconcile of %s: exit %d, %+v; stderr %s", r.Instance, code, rep, rstderr)
		}
		for _, it := range append(rep.Removed, rep.Closed...) {
			if it.Instance != probe {
				t.Errorf("item %+v not named as the probe's (%s)", it, probe)
			}
		}
		for _, e := range r.entries(probe) {
			if e.Open() {
				t.Errorf("probe entry %s still open (%s)", e.LaunchID, e.State)
			}
		}
		if b := r.boxes(probe); len(b) != 0 {
			t.Errorf("probe boxes left after reconcile: %v", b)
		}
	}
}

// TestEscapePinBoxFile: the attacker's side of TestDockerAutoRemoveFailed.
// An agent that could make a file of its own box immutable (one in its
// /tmp, or the hostname file dockerd binds in) would make the engine's
// removal fail and keep its box on the host. It has no
// CAP_LINUX_IMMUTABLE: EPERM (EROFS for the hostname file of a
// read-only root), and the box is removed.
func TestEscapePinBoxFile(t *testing.T) {
	for _, proto := range rigs(t, "docker") {
		r := *proto
		r.setup(t)
		esc := ktest.ToolPath(t, "escape")
		res := runCmd(r.supervisor([]string{"E=" + escapeDir + "/escape"}, "--mount", filepath.Dir(esc)+":"+escapeDir+":ro", "--env", "E",
			"--", "sh", "-c", `echo x > /tmp/f && "$E" pin /tmp/f /etc/hostname`))
		if res.code != 0 {
			t.Fatalf("exit %d, stderr %s", res.code, res.stderr)
		}
		got := lines(res.stdout)
		if got["pin:/tmp/f"] != "EPERM" {
			t.Errorf("the agent pinning its /tmp/f: %q, want EPERM", got["pin:/tmp/f"])
		}
		// The root, and so the hostname file, is read-only by default.
		if v := got["pin:/etc/hostname"]; v != "EPERM" && v != "EROFS" {
			t.Errorf("the agent pinning /etc/hostname: %q, want EPERM or EROFS", v)
		}
		r.assertClean()
	}
}
