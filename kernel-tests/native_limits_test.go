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
	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/runtime/native"
)

// watcherStarved fails a box whose stream ended without an exit
// record. A Go PID 1 that needs a new OS thread while the agent holds
// every pid of the limit would die with "fatal error: newosproc"; the
// watcher makes its threads before the agent starts so that it never
// needs one then.
func watcherStarved(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("the box ended without an exit record under the pids limit (the watcher starved of threads?): %v", err)
	}
}

// pidsDir is the box's pids cgroup folder (v1) or its cgroup (v2).
func pidsDir(t *testing.T, b *supervisor.Box) string {
	for _, d := range cgroupDirs(t, b) {
		if _, err := os.Stat(filepath.Join(d, "pids.max")); err == nil {
			return d
		}
	}
	t.Fatalf("no pids controller in %v", cgroupDirs(t, b))
	return ""
}

// A shell that forks 200 sleeps gets no more than the pids limit: dash
// gives up at the first failed fork.
func TestNativePidsLimit(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	b := newBox(t, bins)
	b.PidsLimit = 48
	script := `i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); echo $i; done`
	r, err := runBoxEOF(t, rt, b, agentSpec("/bin/sh", "-c", script), func(shared.Ready) {
		if got := readFileTrim(t, filepath.Join(pidsDir(t, b), "pids.max")); got != "48" {
			t.Errorf("pids.max = %s, want 48", got)
		}
	})
	watcherStarved(t, err)
	checkEmptyThenRemove(t, rt, b)
	if err != nil {
		return
	}
	out := strings.Fields(r.Stdout)
	n := 0
	if len(out) > 0 {
		n, _ = strconv.Atoi(out[len(out)-1])
	}
	t.Logf("exit %+v after %v; %d sleeps started; stderr %q", r.Exit, r.Total, n, r.Stderr)
	if n == 0 || n >= 48 || r.Exit.Code == 0 || !strings.Contains(strings.ToLower(r.Stderr), "fork") {
		t.Fatalf("%d sleeps started, exit %d, stderr %q; want fewer than the limit 48 and a failed fork", n, r.Exit.Code, r.Stderr)
	}
}

// A real fork bomb is contained by the pids limit, ended by the deadline
// and leaves nothing behind. The bomb runs in a child shell (a shell whose
// own fork fails exits at once); the main one spins in a builtin loop,
// which needs no fork, until the deadline.
func TestNativeForkBomb(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	b := newBox(t, bins)
	b.PidsLimit = 64
	spec := agentSpec("/bin/sh", "-c", `sh -c 'b() { b | b & }; b' 2>/dev/null & while :; do :; done`)
	spec.Deadline = 1500 * time.Millisecond
	spec.Grace = 200 * time.Millisecond
	var peak int
	r, err := runBoxEOF(t, rt, b, spec, func(shared.Ready) {
		dir := pidsDir(t, b)
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if n, err := strconv.Atoi(readFileTrim(t, filepath.Join(dir, "pids.current"))); err == nil && n > peak {
				peak = n
			}
		}
		ev := readFileTrim(t, filepath.Join(dir, "pids.events"))
		t.Logf("pids.current peak %d (limit 64); pids.events: %s", peak, ev)
		if !strings.Contains(ev, "max ") || strings.HasSuffix(ev, "max 0") {
			t.Errorf("pids.events %q: the limit was never hit", ev)
		}
	})
	t.Logf("exit %+v after %v", r.Exit, r.Total)
	watcherStarved(t, err)
	if peak > 64 {
		t.Errorf("peak %d processes above the limit 64", peak)
	}
	if err == nil && (r.Exit.Reason != shared.ReasonDeadline || r.Exit.Code != shared.ExitDeadline) {
		t.Errorf("exit %+v; want the deadline", r.Exit)
	}
	checkEmptyThenRemove(t, rt, b)
}

// checkEmptyThenRemove: once the box ended its cgroup holds nothing (the
// PID namespace died with its PID 1), and Remove takes the cgroup away.
func checkEmptyThenRemove(t *testing.T, rt supervisor.Runtime, b *supervisor.Box) {
	t.Helper()
	dirs := cgroupDirs(t, b)
	empty := ktest.WaitFor(ktest.Slack, func() bool {
		for _, d := range dirs {
			if ps, err := cgroupProcs(d); err != nil || len(ps) != 0 {
				return false
			}
		}
		return true
	})
	if !empty {
		for _, d := range dirs {
			ps, err := cgroupProcs(d)
			t.Errorf("cgroup %s holds %v 2s after the box ended (%v)", d, ps, err)
		}
	}
	if err := rt.Remove(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left after Remove", d)
		}
	}
}

// An allocation past the memory limit is killed; one below it is not.
func TestNativeMemoryLimit(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	for _, c := range []struct {
		size string
		want int
	}{
		{"16M", 0},
		{"256M", shared.SignalStatus(9)},
	} {
		t.Run(c.size, func(t *testing.T) {
			b := newBox(t, bins)
			b.Memory = 96 << 20
			var memDir string
			r := runBox(t, rt, b, agentSpec("/bin/sh", "-c", "exec dd if=/dev/zero of=/dev/null bs="+c.size+" count=2"), func(shared.Ready) {
				memDir = cgroupDirs(t, b)[0]
			})
			t.Logf("dd bs=%s with a %d MiB limit: exit %+v; stderr %q", c.size, b.Memory>>20, r.Exit, r.Stderr)
			if r.Exit.Code != c.want {
				t.Errorf("exit code %d, want %d", r.Exit.Code, c.want)
			}
			if b.State[native.StateCgroupVersion] == "1" {
				// The agent's own cgroup holds the limit; the box's (the
				// watcher's) the limit and the watcher's reserve.
				agentDir := filepath.Join(memDir, native.AgentMemoryGroup)
				for dir, want := range map[string]int{agentDir: 96 << 20, memDir: 96<<20 + native.WatcherMemoryReserve} {
					limit := readFileTrim(t, filepath.Join(dir, "memory.limit_in_bytes"))
					sw := readFileTrim(t, filepath.Join(dir, "memory.memsw.limit_in_bytes"))
					if limit != strconv.Itoa(want) || sw != limit {
						t.Errorf("%s: memory.limit_in_bytes %s, memsw %s; want both %d", dir, limit, sw, want)
					}
				}
				oom := readFileTrim(t, filepath.Join(agentDir, "memory.oom_control"))
				t.Logf("memory.oom_control: %s", strings.ReplaceAll(oom, "\n", ", "))
			}
		})
	}
}

// An unprivileged supervisor with a delegated cgroup gets limits too:
// root hands dwtest a folder (below each controller on v1, with
// DEATHWATCH_CGROUP_PARENT). On v2, as systemd delegates one, the
// supervisor runs in a child of the delegated folder: it finds the
// folder by itself, or takes DEATHWATCH_CGROUP_PARENT there; one started
// outside it is refused before the clone, with cgroup v2's
// common-ancestor rule named.
func TestNativeUnprivilegedDelegatedCgroup(t *testing.T) {
	requireUnprivilegedUserns(t)
	bins := ktest.Build(t)
	uid, _ := strconv.Atoi(lookupUID(t, ktest.RootlessUser))
	parent := "/dw-deleg-" + boxName(t)
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		var dirs []string
		for _, c := range []string{"memory", "pids", "freezer"} {
			d := filepath.Join("/sys/fs/cgroup", c) + parent
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			filepath.Walk(d, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, uid, uid) })
			dirs = append(dirs, d)
		}
		t.Cleanup(func() { removeDelegated(t, dirs...) })
		out, _ := runDelegated(t, bins, parent, nil)
		checkPidsHeld(t, out)
		checkNoBoxLeft(t, dirs...)
		return
	}
	// v2: the delegated folder, and the supervisor's own leaf in it.
	d := "/sys/fs/cgroup" + parent
	sup := d + "/sup"
	os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory +pids"), 0)
	for _, dir := range []string{d, sup} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"", "/cgroup.procs", "/cgroup.subtree_control", "/cgroup.threads"} {
			os.Chown(dir+f, uid, uid)
		}
	}
	t.Cleanup(func() {
		removeDelegated(t, d+"/"+native.DelegatedParent, d+"/boxes", sup, d)
	})
	leaf, err := os.Open(sup)
	if err != nil {
		t.Fatal(err)
	}
	defer leaf.Close()
	t.Run("found", func(t *testing.T) {
		out, _ := runDelegated(t, bins, "", leaf)
		checkPidsHeld(t, out)
		checkNoBoxLeft(t, d+"/"+native.DelegatedParent)
	})
	t.Run("named", func(t *testing.T) {
		out, _ := runDelegated(t, bins, parent+"/boxes", leaf)
		checkPidsHeld(t, out)
		checkNoBoxLeft(t, d+"/boxes")
	})
	t.Run("outside", func(t *testing.T) {
		out, code := runDelegated(t, bins, parent+"/boxes", nil)
		if code != shared.ExitRefused || !strings.Contains(out, "CLONE_INTO_CGROUP") || !strings.Contains(out, "common ancestor") {
			t.Fatalf("exit %d: %s; want %d and the common-ancestor rule named", code, out, shared.ExitRefused)
		}
	})
}

// runDelegated runs a fork loop of 200 sleeps as dwtest under
// --pids-limit 40 --memory 128m, with DEATHWATCH_CGROUP_PARENT set to
// parent (unless ""), started in the v2 cgroup leaf when one is given.
func runDelegated(t *testing.T, bins ktest.Binaries, parent string, leaf *os.File) (string, int) {
	t.Helper()
	journal := sharedTempDir(t)
	script := `i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); echo $i; done`
	env := []string{"env"}
	if parent != "" {
		env = append(env, native.EnvCgroupParent+"="+parent)
	}
	asUser := ktest.AsUser
	if leaf != nil {
		// In the test's leaf: the user's session would move it out.
		asUser = ktest.AsUserHere
	}
	cmd := asUser(ktest.RootlessUser, env[0], append(env[1:], bins.Supervisor, "exec", "--runtime", "native",
		"--journal", journal, "--watcher", bins.Watcher, "--pids-limit", "40", "--memory", "128m", "--", "/bin/sh", "-c", script)...)
	if leaf != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(leaf.Fd())}
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("as %s, %s=%q: exit %d", ktest.RootlessUser, native.EnvCgroupParent, parent, code)
	return string(out), code
}

// checkPidsHeld: the fork loop started fewer sleeps than the limit of 40
// and a fork failed.
func checkPidsHeld(t *testing.T, out string) {
	t.Helper()
	fields := strings.Fields(out)
	n := 0
	for _, f := range fields {
		if v, err := strconv.Atoi(f); err == nil {
			n = v
		}
	}
	t.Logf("%d sleeps started (limit 40); output tail %q", n, strings.Join(fields[max(0, len(fields)-6):], " "))
	if n == 0 || n >= 40 || !strings.Contains(out, "fork") {
		t.Fatalf("%d sleeps started; want fewer than the limit 40 and a failed fork: %s", n, out)
	}
}

// checkNoBoxLeft: no box cgroup is left in the parent folders.
func checkNoBoxLeft(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		es, err := os.ReadDir(d)
		if err != nil {
			t.Errorf("the boxes' parent %s: %v", d, err)
		}
		for _, e := range es {
			if e.IsDir() {
				t.Errorf("box cgroup %s/%s left behind", d, e.Name())
			}
		}
	}
}

// removeDelegated removes the delegated folders, deepest first; one
// that is missing is fine.
func removeDelegated(t *testing.T, dirs ...string) {
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			t.Errorf("remove the delegated cgroup: %v (a box cgroup left below it?)", err)
		}
	}
}
