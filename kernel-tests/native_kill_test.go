package kerneltests

import (
	"bufio"
	"context"
	"deathwatch/supervisor/journal"
	"encoding/json"
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
	"deathwatch/supervisor/reconcile"
	"deathwatch/supervisor/runtime/native"
)

// longAgent leaves descendants that ignore TERM and escape into their own
// sessions, then says ready.
const longAgent = `trap '' TERM; setsid sh -c "trap '' TERM; sleep 1000" & sleep 1000 & (trap '' TERM; exec sleep 1000) & echo ready; wait`

// killInstance is the kill trials' instance, this run's own: reconcile
// then sees only the boxes this run left, not what an earlier run on
// the machine did.
var killInstance = fmt.Sprintf("ktest-kill-%d", os.Getpid())

// killTrial starts `supervisor exec --runtime native` (as user, "" for
// root), waits until the agent is ready, SIGKILLs the supervisor and
// returns how long until every process of the box was dead, and the
// journal directory.
func killTrial(t *testing.T, bins ktest.Binaries, user string, extra ...string) (time.Duration, string, int) {
	return killTrialAgent(t, bins, user, longAgent, 5, extra...)
}

// killTrialAgent is killTrial with the agent's script (which says ready
// once at least minProcs processes of the box run).
func killTrialAgent(t *testing.T, bins ktest.Binaries, user, script string, minProcs int, extra ...string) (time.Duration, string, int) {
	t.Helper()
	took, journal, n, _ := killTrialReport(t, bins, user, script, minProcs, extra...)
	return took, journal, n
}

// killTrialReport is killTrialAgent that also returns what the agent
// reported before "ready": its "what: result" lines.
func killTrialReport(t *testing.T, bins ktest.Binaries, user, script string, minProcs int, extra ...string) (time.Duration, string, int, map[string]string) {
	t.Helper()
	journal := sharedTempDir(t)
	args := append([]string{"exec", "--runtime", "native", "--journal", journal, "--instance", killInstance, "--watcher", bins.Watcher}, extra...)
	args = append(args, "--", "/bin/sh", "-c", script)
	var cmd *exec.Cmd
	if user == "" {
		cmd = exec.Command(bins.Supervisor, args...)
	} else {
		cmd = ktest.AsUser(user, bins.Supervisor, args...)
	}
	cmd.Stderr = testWriter{t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	report := map[string]string{}
	rd := bufio.NewReader(out)
	for {
		line, err := rd.ReadString('\n')
		if line == "ready\n" {
			break
		}
		k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), ": ")
		if err != nil || !ok {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("agent did not say ready: %q %v", line, err)
		}
		report[k] = v
	}
	// The supervisor (runuser's child when run as a user).
	sup := cmd.Process.Pid
	if user != "" {
		kids := ktest.Descendants(sup)
		if len(kids) == 0 {
			t.Fatalf("no supervisor below runuser")
		}
		sup = kids[0].PID
	}
	var init int
	for _, p := range ktest.Descendants(sup) {
		if st, err := ktest.ReadStat(p.PID); err == nil && st.PPID == sup {
			init = p.PID
		}
	}
	ns, err := ktest.PIDNamespace(init)
	if err != nil || init == 0 {
		t.Fatalf("box init below supervisor %d: pid %d, %v", sup, init, err)
	}
	box := ktest.InNamespace(ns)
	if len(box) < minProcs {
		t.Fatalf("box holds %d processes (%s); want at least %d", len(box), ktest.Describe(box), minProcs)
	}
	checkLivePipe(t, sup, init)
	start := time.Now()
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	took, left := ktest.WaitDead(box, start, 2*ktest.Slack)
	if len(left) > 0 {
		for _, p := range left {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
		t.Fatalf("after SIGKILL of the supervisor, %s still run after %v", ktest.Describe(left), took)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return took, journal, len(box), report
}

// checkLivePipe: the box's init (the watcher) was given the live pipe
// (--live-fd), and the supervisor holds its other end in one thread's
// own file table, not in the process's (/proc/PID/fd): its SIGKILL
// closes it in that thread's exit, before its address space goes.
func checkLivePipe(t *testing.T, sup, init int) {
	t.Helper()
	argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", init))
	if err != nil {
		t.Fatal(err)
	}
	var fd string
	for _, a := range strings.Split(string(argv), "\x00") {
		if v, ok := strings.CutPrefix(a, "--live-fd="); ok {
			fd = v
		}
	}
	if fd == "" {
		t.Fatalf("box init %d runs %q: no --live-fd", init, strings.ReplaceAll(string(argv), "\x00", " "))
	}
	pipe, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", init, fd))
	if err != nil || !strings.HasPrefix(pipe, "pipe:") {
		t.Fatalf("box init %d: --live-fd=%s is %q (%v), want a pipe", init, fd, pipe, err)
	}
	holds := func(dir string) bool {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == pipe {
				return true
			}
		}
		return false
	}
	if holds(fmt.Sprintf("/proc/%d/fd", sup)) {
		t.Errorf("supervisor %d holds the live pipe %s in the process's file table; want it on a thread of its own", sup, pipe)
	}
	var tasks []string
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", sup))
	for _, e := range ents {
		if holds(fmt.Sprintf("/proc/%d/task/%s/fd", sup, e.Name())) {
			tasks = append(tasks, e.Name())
		}
	}
	if len(tasks) != 1 {
		t.Errorf("supervisor %d: the live pipe %s is open in the tables of threads %v; want exactly one", sup, pipe, tasks)
	}
}

// sharedTempDir is a temporary folder the unprivileged user can write.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "dw-native-")
	if err != nil {
		t.Fatal(err)
	}
	// Sticky, like /tmp: each user's journal folder inside stays its
	// own (a plain 0777 folder would let anyone swap it, and the
	// supervisor refuses a journal below one).
	os.Chmod(d, os.ModeSticky|0o777)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// openEntry is the one journal entry of a killed supervisor.
func openEntry(t *testing.T, dir string) *journal.Entry {
	t.Helper()
	j, err := journal.Open(dir, killInstance, nil)
	if err != nil {
		t.Fatal(err)
	}
	es, _, err := j.List()
	if err != nil || len(es) != 1 {
		t.Fatalf("journal %s: %d entries, %v", dir, len(es), err)
	}
	return es[0]
}

func TestNativeSupervisorKilled(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	rt := native.New(nil, native.Options{})
	const trials = 12
	var times []time.Duration
	for i := 0; i < trials; i++ {
		took, journal, n := killTrial(t, bins, "", "--pids-limit", "100")
		times = append(times, took)
		e := openEntry(t, journal)
		if !e.Open() {
			t.Fatalf("journal entry %s is closed after SIGKILL; want it open for reconcile", e.LaunchID)
		}
		b := &supervisor.Box{Name: e.Box, State: e.RuntimeState}
		dirs := cgroupDirs(t, b)
		emptied := time.Now()
		empty := func() bool {
			for _, d := range dirs {
				if ps, err := cgroupProcs(d); err != nil || len(ps) != 0 {
					return false
				}
			}
			return true
		}
		if !ktest.WaitFor(ktest.Slack, empty) {
			for _, d := range dirs {
				ps, err := cgroupProcs(d)
				t.Errorf("cgroup %s holds %v 2s after the box died (%v)", d, ps, err)
			}
		}
		if i == 0 {
			t.Logf("trial 1: the cgroup was empty %v after the box processes died", time.Since(emptied))
		}
		// A later cleanup removes it: reconcile, from the journal entry.
		rep := reconcileKilled(t, journal)
		if e := openEntry(t, journal); e.Open() {
			t.Errorf("journal entry %s still open after reconcile", e.LaunchID)
		}
		// Idempotent: a second Remove finds nothing and is fine.
		if err := rt.Remove(context.Background(), b); err != nil {
			t.Fatalf("remove again: %v", err)
		}
		for _, d := range dirs {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				t.Errorf("cgroup %s left after remove", d)
			}
		}
		if i == 0 {
			t.Logf("trial 1: %d box processes dead %v after SIGKILL; cgroup %v empty, then removed by reconcile (%+v)", n, took, dirs, append(rep.Removed, rep.Closed...))
		}
	}
	t.Logf("SIGKILL supervisor -> every box process dead, %d trials: p50 %v, p95 %v, max %v",
		trials, pct(times, 0.5), pct(times, 0.95), pct(times, 1))
}

// The same as the unprivileged user (user namespace, no cgroup of its
// own: the PID namespace is the kill domain).
func TestNativeSupervisorKilledUnprivileged(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	requireUnprivilegedUserns(t)
	var times []time.Duration
	for i := 0; i < 5; i++ {
		took, journal, _ := killTrial(t, bins, ktest.RootlessUser)
		times = append(times, took)
		reconcileKilledAs(t, bins, ktest.RootlessUser, journal)
	}
	t.Logf("as %s: SIGKILL supervisor -> every box process dead, %d trials: p50 %v, max %v", ktest.RootlessUser, len(times), pct(times, 0.5), pct(times, 1))
}

// reconcileKilled reconciles the one box a root kill trial left, from
// its journal, and returns the report.
func reconcileKilled(t *testing.T, journal string) *reconcile.Report {
	t.Helper()
	rep, err := reconcile.Run(context.Background(), reconcile.Options{Instance: killInstance, JournalDir: journal, Runtimes: []string{"native"}})
	checkReconciled(t, rep, err)
	return rep
}

// reconcileKilledAs is reconcileKilled for an unprivileged user's trial:
// `supervisor reconcile` run as the user, as a controller would after a
// crash (its records are the user's own, below its XDG_RUNTIME_DIR).
func reconcileKilledAs(t *testing.T, bins ktest.Binaries, user, journal string) {
	t.Helper()
	out, err := ktest.AsUser(user, bins.Supervisor, "--instance", killInstance, "--journal", journal, "reconcile", "--json").Output()
	var rep reconcile.Report
	if jerr := json.Unmarshal(out, &rep); err == nil && jerr != nil {
		err = jerr
	}
	if err == nil {
		ktest.CheckOutput(t, ktest.SchemaReconcile, out)
	}
	checkReconciled(t, &rep, err)
}

// checkReconciled: reconcile removed (or found gone) the trial's one box
// and was blocked by nothing.
func checkReconciled(t *testing.T, rep *reconcile.Report, err error) {
	t.Helper()
	if err != nil || len(rep.Removed)+len(rep.Closed) != 1 || len(rep.Blocked) != 0 {
		t.Fatalf("reconcile: %+v, %v", rep, err)
	}
}

// livePipeScript is the agent of TestEscapeNativeLivePipe: it looks for
// the watcher's live pipe (its number is in the watcher's argv) and tries
// to list the watcher's descriptors, to open the pipe through /proc/1/fd
// for writing (a writer would keep the box alive past its supervisor)
// and for reading, and lists its own descriptors.
const livePipeScript = `
try() { what=$1; shift; if out=$( ("$@") 2>&1 >/dev/null); then echo "$what: ok"; else echo "$what: $(echo $out | tr '\n' ' ')"; fi; }
fd=$(tr '\0' '\n' </proc/1/cmdline | sed -n 's/^--live-fd=//p')
echo "live-fd: ${fd:-none}"
try watcher-fds ls /proc/1/fd
for n in ${fd:-3 4 5 6 7 8 9}; do try "open-write-$n" sh -c "exec 3>/proc/1/fd/$n"; try "open-read-$n" sh -c "exec 3</proc/1/fd/$n"; done
echo "own-fds: $(ls /proc/self/fd | tr '\n' ' ')"
echo ready
exec sleep 1000
`

// TestEscapeNativeLivePipe: the agent of a native box (root's and an
// unprivileged user's) can neither list the watcher's descriptors nor
// open its live pipe through /proc/1/fd, and inherits no descriptor but
// its standard three; its supervisor's SIGKILL then kills the box.
func TestEscapeNativeLivePipe(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	requireUnprivilegedUserns(t)
	for _, user := range []string{"", ktest.RootlessUser} {
		name := user
		if name == "" {
			name = "root"
		}
		t.Run(name, func(t *testing.T) {
			_, journal, _, rep := killTrialReport(t, bins, user, livePipeScript, 2)
			if user == "" {
				reconcileKilled(t, journal)
			} else {
				reconcileKilledAs(t, bins, user, journal)
			}
			t.Logf("agent's report: %v", rep)
			if rep["live-fd"] == "none" {
				t.Errorf("the agent could not read --live-fd from the watcher's argv; the probe below tried descriptors 3-9 instead")
			}
			tried := 0
			for k, v := range rep {
				if !strings.HasPrefix(k, "open-") && k != "watcher-fds" {
					continue
				}
				tried++
				if !strings.Contains(v, "Permission denied") && !strings.Contains(v, "Operation not permitted") {
					t.Errorf("agent %s: %q, want EACCES or EPERM", k, v)
				}
			}
			if tried < 3 {
				t.Errorf("the agent reported %d attempts (%v); want the listing and both opens", tried, rep)
			}
			if got := strings.TrimSpace(rep["own-fds"]); got != "0 1 2 3" {
				t.Errorf("agent's descriptors (ls /proc/self/fd): %q, want \"0 1 2 3\" (its stdio and ls's own)", got)
			}
		})
	}
}

// requireUnprivilegedUserns fails (never skips) when the kernel forbids
// what the unprivileged tests need.
func requireUnprivilegedUserns(t *testing.T) {
	t.Helper()
	out, err := ktest.AsUser(ktest.RootlessUser, "unshare", "--user", "--map-root-user", "true").CombinedOutput()
	if err != nil {
		t.Fatalf("user %s cannot create a user namespace here (%v: %s); the unprivileged native tests need a kernel that allows it (kernel-tests/provision.sh creates the user)", ktest.RootlessUser, err, strings.TrimSpace(string(out)))
	}
}

// The unprivileged user runs a box: isolated the same way.
func TestNativeUnprivileged(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	requireUnprivilegedUserns(t)
	journal := sharedTempDir(t)
	script := `echo ppid=$PPID; echo uid=$(id -u); echo ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '); (echo x > /etc/x) 2>/dev/null && echo wrote=etc; echo x > /tmp/x && echo tmp=ok; echo procs=$(ls /proc | grep -c '^[0-9]')`
	cmd := ktest.AsUser(ktest.RootlessUser, bins.Supervisor, "exec", "--runtime", "native", "--journal", journal, "--watcher", bins.Watcher, "--", "/bin/sh", "-c", script)
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("as %s in %v:\n%s", ktest.RootlessUser, time.Since(start), out)
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("supervisor exec as %s: %v: %s", ktest.RootlessUser, err, stderr)
	}
	got := lines(string(out))
	for k, v := range map[string]string{"ppid": "1", "uid": "1000", "ifaces": "lo", "wrote": "", "tmp": "ok"} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if n := got["procs"]; n == "" || len(n) > 1 {
		t.Errorf("the box sees %s processes; want only its own few", n)
	}

	// --image: a busybox tree as the root.
	rootfs := ktest.BusyboxRootfs(t)
	cmd = ktest.AsUser(ktest.RootlessUser, bins.Supervisor, "exec", "--runtime", "native", "--journal", journal, "--watcher", bins.Watcher, "--image", rootfs,
		"--", "/bin/sh", "-c", "echo user=$(id -un); test -e /usr/local/go || echo host=hidden")
	out, err = cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "user=agent") || !strings.Contains(string(out), "host=hidden") {
		t.Fatalf("busybox rootfs as %s: %v: %s", ktest.RootlessUser, err, out)
	}
}

var _ = fmt.Sprint
