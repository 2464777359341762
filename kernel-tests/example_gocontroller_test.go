package kerneltests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// examples/gocontroller, the Go controller of the library: built as a
// user builds it, run on the native runtime as root.

// buildGoController builds the example into a folder of the test's;
// where there is no Go (the VM rig's guests) the rig built it
// beforehand, as it builds ktest's programs, into DEATHWATCH_KTEST_TOOLS.
func buildGoController(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("DEATHWATCH_KTEST_TOOLS"); dir != "" {
		bin := filepath.Join(dir, "gocontroller")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("the example Go controller, built beforehand: %v (DEATHWATCH_KTEST_TOOLS=%s)", err, dir)
		}
		return bin
	}
	bin := filepath.Join(t.TempDir(), "gocontroller")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./examples/gocontroller")
	cmd.Dir = ktest.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/gocontroller: %v\n%s", err, out)
	}
	return bin
}

// TestExampleGoController: a pool of 3 boxes that write into a shared
// folder (an idmapped mount: the native runtime re-executes the
// controller, which Init serves) exits 0 with one result line per box,
// the files owned by the named account, and the controller's main ran
// once; a box past its deadline ends 246 and its line says so.
func TestExampleGoController(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	ctl := buildGoController(t)
	journal := sharedTempDir(t)
	share := sharedTempDir(t)
	if err := os.Chown(share, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	// run returns the controller's exit status and its output, stdout
	// and stderr together.
	run := func(args ...string) (int, string) {
		cmd := exec.Command(ctl, append([]string{"-journal", journal, "-watcher", bins.Watcher}, args...)...)
		code, out, err := ktest.ExitStatus(cmd, 120*time.Second)
		if err != nil {
			t.Fatalf("gocontroller %v: %v\n%s", args, err, out)
		}
		return code, out
	}
	code, out := run("-boxes", "3", "-deadline", "60s", "-share", share, "-share-owner", "1000:1000", "--",
		"/bin/sh", "-c", "echo written > /share/box$BOX")
	if code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, out)
	}
	for i := range 3 {
		if !strings.Contains(out, fmt.Sprintf("box %d: exit 0 (exited)", i)) {
			t.Errorf("no result line for box %d:\n%s", i, out)
		}
		st, err := os.Stat(filepath.Join(share, fmt.Sprintf("box%d", i)))
		if err != nil {
			t.Errorf("box %d wrote nothing into the shared folder: %v", i, err)
		} else if uid, gid := ownerOf(st); uid != 1000 || gid != 1000 {
			t.Errorf("box %d's file is %d:%d's, want 1000:1000's", i, uid, gid)
		}
	}
	if n := strings.Count(out, "gocontroller: started"); n != 1 {
		t.Errorf("the controller's main ran %d times, want once (Init serves the re-exec):\n%s", n, out)
	}

	code, out = run("-boxes", "1", "-deadline", "1s", "--", "/bin/sleep", "60")
	if code != shared.ExitDeadline || !strings.Contains(out, fmt.Sprintf("box 0: exit %d (deadline)", shared.ExitDeadline)) {
		t.Errorf("a box past its deadline: exit %d, want %d and its line:\n%s", code, shared.ExitDeadline, out)
	}
}

// TestExampleGoControllerKilled: the chain promise through the
// library's link: the example controller runs 3 boxes, is SIGKILLed
// once they are ready, and no agent of them lives on; reconcile at the
// controller's restart finds nothing blocked.
func TestExampleGoControllerKilled(t *testing.T) {
	const n = 3
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	journal := sharedTempDir(t)
	marker := chainMarker("gocontroller")
	cmd := exec.Command(buildGoController(t), "-journal", journal, "-watcher", bins.Watcher, "-boxes", fmt.Sprint(n), "-deadline", "10m", "--",
		"/bin/sh", "-c", "while :; do sleep 1; done", marker)
	reconcile := func() (int, string) {
		out, err := exec.Command(bins.Supervisor, "--journal", journal, "--instance", "gocontroller", "reconcile").CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return code, string(out)
	}
	ctl := runChain(t, cmd, marker, journal, func() { reconcile() })
	for range n {
		ctl.until("ready ")
	}
	ps := ctl.procs(n)
	took := chainDead(t, ps, ctl.kill(), "after SIGKILL of the Go controller")
	t.Logf("controller SIGKILL → last of %d agents dead: %v", len(ps), took)
	if code, out := reconcile(); code != 0 {
		t.Fatalf("reconcile at restart: exit %d\n%s", code, out)
	}
}

// ownerOf is a file's uid and gid.
func ownerOf(fi os.FileInfo) (uint32, uint32) {
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}
