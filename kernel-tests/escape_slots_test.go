package kerneltests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor/proc"
	"deathwatch/supervisor/runtime/native"
)

// The boxes' host id slots on the native runtime: two unprivileged
// boxes of one user share no host id, and a slot a SIGKILLed supervisor
// left is taken back.

// agentOf waits for the agent (its argv joined by spaces) below the
// process pid and returns its host pid.
func agentOf(t *testing.T, pid int, argv string) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range ktest.Descendants(pid) {
			if strings.Join(ktest.Cmdline(p.PID), " ") == argv {
				return p.PID
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %q process below pid %d", argv, pid)
	return 0
}

// TestEscapeUnprivilegedBoxesApart: an unprivileged user's boxes all
// mapped the user's subordinate range the same way, so their agents ran
// as one host uid: box A's agent read the 0600 file box B's agent wrote
// in a folder both were given, and that host uid could signal, trace
// and read /proc/PID/environ of the other box's agent. Now each box has
// a slot of its own and none of it works.
func TestEscapeUnprivilegedBoxesApart(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	requireUnprivilegedUserns(t)
	shared := sharedTempDir(t)
	journal := sharedTempDir(t)
	esc := ktest.ToolPath(t, "escape")
	const secret = "BOX-ENV-SECRET-31"
	type box struct {
		name  string
		cmd   *exec.Cmd
		out   bytes.Buffer
		agent int
	}
	boxes := []*box{{name: "A"}, {name: "B"}}
	for i, b := range boxes {
		other := boxes[1-i].name
		script := fmt.Sprintf(`"$0" write /tmp/s/%s; while [ ! -e /tmp/s/%s ]; do sleep 0.05; done; "$0" read /tmp/s/%s; echo up; exec sleep 60`, b.name, other, other)
		b.cmd = ktest.AsUser(ktest.RootlessUser, "env", "DW_SECRET="+secret, bins.Supervisor, "exec", "--runtime", "native", "--journal", journal,
			"--watcher", bins.Watcher, "--env", "DW_SECRET", "--mount", filepath.Dir(esc)+":"+escapeDir+":ro", "--mount", shared+":/tmp/s",
			"--", "/bin/sh", "-c", script, escapeDir+"/escape")
		b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.out
		if err := b.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.cmd.Process.Kill(); b.cmd.Wait() })
	}
	for _, b := range boxes {
		b.agent = agentOf(t, b.cmd.Process.Pid, "sleep 60")
	}
	a, b := boxes[0], boxes[1]
	idsA, idsB := hostIDsOf(t, a.agent), hostIDsOf(t, b.agent)
	t.Logf("agent A pid %d host ids %v; agent B pid %d host ids %v", a.agent, idsA, b.agent, idsB)
	inB := map[int]bool{}
	for _, y := range idsB {
		inB[y] = true
	}
	for _, x := range idsA {
		if inB[x] {
			t.Errorf("the agents of two boxes of %s share host id %d", ktest.RootlessUser, x)
			delete(inB, x)
		}
	}
	// As box A's agent's host identity: signal, trace, read /proc of B's.
	p := strconv.Itoa(b.agent)
	cmd := exec.Command("setpriv", "--reuid", strconv.Itoa(idsA[0]), "--regid", strconv.Itoa(idsA[4]), "--clear-groups",
		esc, "kill", p)
	kill, _ := cmd.CombinedOutput()
	cmd = exec.Command("setpriv", "--reuid", strconv.Itoa(idsA[0]), "--regid", strconv.Itoa(idsA[4]), "--clear-groups",
		esc, "read", "/proc/"+p+"/environ", filepath.Join(shared, "B"))
	read, _ := cmd.CombinedOutput()
	got := lines(string(kill) + string(read))
	t.Logf("as A's agent's host ids:\n%s%s", kill, read)
	if got["kill:"+p] != "EPERM" {
		t.Errorf("box A's agent's host uid signalling box B's agent: %q, want EPERM", got["kill:"+p])
	}
	out, _ := exec.Command("setpriv", "--reuid", strconv.Itoa(idsA[0]), "--regid", strconv.Itoa(idsA[4]), "--clear-groups", esc, "ptrace", p).CombinedOutput()
	if v := lines(string(out))["ptrace:"+p]; v != "EPERM" {
		t.Errorf("box A's agent's host uid tracing box B's agent: %q, want EPERM", v)
	}
	if v := got["read:/proc/"+p+"/environ"]; v != "EACCES" || strings.Contains(string(read), secret) {
		t.Errorf("box A's agent's host uid reading box B's agent's environ: %q, want EACCES", v)
	}
	// Inside the boxes: each agent read the other's 0600 file.
	syscall.Kill(a.agent, syscall.SIGKILL)
	syscall.Kill(b.agent, syscall.SIGKILL)
	a.cmd.Wait()
	b.cmd.Wait()
	for i, x := range boxes {
		other := boxes[1-i].name
		v := lines(x.out.String())["read:/tmp/s/"+other]
		t.Logf("box %s: %s", x.name, strings.TrimSpace(x.out.String()))
		if v != "EACCES" {
			t.Errorf("box %s's agent reading box %s's 0600 file in the folder both were given: %q, want EACCES", x.name, other, v)
		}
	}
}

// slotFileOf is the slot lock file in dir that names supervisor pid as
// its owner, and its text.
func slotFileOf(t *testing.T, dir string, pid int) (string, string) {
	t.Helper()
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "owner" && f[1] == strconv.Itoa(pid) {
				return filepath.Join(dir, e.Name()), string(b)
			}
		}
	}
	return "", ""
}

// slotInit is the box's init a slot lock file's text names (its "init
// PID START" line); PID 0 for none.
func slotInit(text string) proc.Proc {
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "init" {
			pid, _ := strconv.Atoi(f[1])
			start, _ := strconv.ParseUint(f[2], 10, 64)
			return proc.Proc{PID: pid, Start: start}
		}
	}
	return proc.Proc{}
}

// TestNativeIDSlotReclaim: a root supervisor SIGKILLed while its box
// ran left the box's host id slot held until a reconcile that may never
// come; enough crashes used up every slot. Now the next launch takes
// back each slot whose supervisor and init are both gone.
func TestNativeIDSlotReclaim(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	journal := t.TempDir()
	t.Cleanup(func() {
		exec.Command(bins.Supervisor, "--journal", journal, "reconcile", "--runtime", "native").Run()
	})
	const crashes = 8
	left := map[string]string{}
	for i := 0; i < crashes; i++ {
		cmd := exec.Command(bins.Supervisor, "exec", "--runtime", "native", "--journal", journal, "--watcher", bins.Watcher, "--", "/bin/sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		agent := agentOf(t, cmd.Process.Pid, "/bin/sleep 60")
		file, text := slotFileOf(t, native.DefaultIDRangeDir, cmd.Process.Pid)
		if file == "" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no slot lock file in %s names supervisor %d as its holder", native.DefaultIDRangeDir, cmd.Process.Pid)
		}
		cmd.Process.Kill()
		cmd.Wait()
		// The box ends on its own (its control stream hit EOF): the
		// agent, then the box's init (the watcher, which the slot
		// names), which a slot outlives until it is gone.
		if _, alive := proc.WaitDead([]proc.Proc{{PID: agent}}, time.Now().Add(10*time.Second+ktest.Slack)); len(alive) > 0 {
			t.Fatalf("the agent %d outlived its SIGKILLed supervisor", agent)
		}
		if init := slotInit(text); init.PID == 0 {
			t.Fatalf("crash %d: the slot %s names no init: %q", i, file, text)
		} else if _, alive := proc.WaitDead([]proc.Proc{init}, time.Now().Add(10*time.Second+ktest.Slack)); len(alive) > 0 {
			t.Fatalf("the box's init %d outlived its SIGKILLed supervisor", init.PID)
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != text {
			t.Fatalf("crash %d: the slot %s was freed before the next launch (%v %q): nothing to take back", i, file, err, b)
		}
		left[file] = text
	}
	// Each launch already took back the slot of the crash before it.
	t.Logf("%d SIGKILLed supervisors' boxes held %d distinct slot files", crashes, len(left))
	t0 := time.Now()
	out, err := exec.Command(bins.Supervisor, "exec", "--runtime", "native", "--journal", journal, "--watcher", bins.Watcher, "--", "/bin/true").CombinedOutput()
	if err != nil {
		t.Fatalf("the next launch: %v: %s", err, out)
	}
	t.Logf("the next launch took %v", time.Since(t0))
	for file, text := range left {
		if b, err := os.ReadFile(file); err == nil && string(b) == text {
			t.Errorf("after the next launch %s is still held by the crashed supervisor's box: %q", file, b)
		}
	}
}
