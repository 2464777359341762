package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// treeScript is the agent tree of the death benchmarks ($0 is a unique
// marker): a setsid'd double fork (orphaned, in its own session), a
// process that ignores SIGTERM, and the main shell, each with a long
// sleep below it; it prints "started" once they all exist. The sleeps
// are long so that the tree is still while it is measured.
const treeScript = `
busybox setsid busybox sh -c 'busybox sh -c "while :; do busybox sleep 1000; done" "$0-setsid" &' "$0"
busybox sh -c 'trap "" TERM; while :; do busybox sleep 1000; done' "$0-noterm" &
echo started
while :; do busybox sleep 1000; done
`

// treeProcs is how many processes the tree holds once still: three
// shells and their three sleeps.
const treeProcs = 6

// deathTimes is one trial: when the last agent process died and when the
// last process of the box (its init included) died, after the kill.
type deathTimes struct{ agent, box time.Duration }

// openPidfds opens a pidfd on each process and returns them; pids must
// stay valid until the kill (each pidfd pins the process it names).
func openPidfds(t *testing.T, ps []ktest.Proc) []int {
	t.Helper()
	var fds []int
	for _, p := range ps {
		fd, err := unix.PidfdOpen(p.PID, 0)
		if err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			t.Fatalf("pidfd_open(%d): %v", p.PID, err)
		}
		// The pid may have been reused between the listing and now.
		if !ktest.Alive(p) {
			unix.Close(fd)
			t.Fatalf("process %d changed before its pidfd was opened", p.PID)
		}
		fds = append(fds, fd)
	}
	return fds
}

// waitPidfds polls the pidfds (readable once the process has exited, a
// zombie or reaped) and returns, for each, how long after since it died.
func waitPidfds(fds []int, since time.Time, timeout time.Duration) ([]time.Duration, error) {
	pfds := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	died := make([]time.Duration, len(fds))
	left := len(fds)
	end := since.Add(timeout)
	for left > 0 {
		wait := time.Until(end)
		if wait <= 0 {
			return died, fmt.Errorf("%d of %d processes still alive %s after the kill", left, len(fds), timeout)
		}
		_, err := unix.Poll(pfds, int(wait/time.Millisecond)+1)
		now := time.Since(since)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return died, fmt.Errorf("poll pidfds: %w", err)
		}
		for i := range pfds {
			if pfds[i].Fd >= 0 && pfds[i].Revents != 0 {
				died[i] = now
				pfds[i].Fd = -1 // ignored from now on
				left--
			}
		}
	}
	return died, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// stillBox waits until the PID namespace ns holds want processes for a
// moment, and returns them.
func stillBox(ns string, want int, timeout time.Duration) ([]ktest.Proc, error) {
	var ps []ktest.Proc
	stable := 0
	ok := ktest.WaitFor(timeout, func() bool {
		cur := ktest.InNamespace(ns)
		if len(cur) == want && len(cur) == len(ps) {
			stable++
		} else {
			stable = 0
		}
		ps = cur
		return stable >= 3
	})
	if !ok {
		desc := "too many to list"
		if len(ps) <= 2*want {
			desc = ktest.Describe(ps)
		}
		return ps, fmt.Errorf("the box's PID namespace %s holds %d processes (%s), want %d", ns, len(ps), desc, want)
	}
	return ps, nil
}

// timeDeath opens pidfds on the box, runs kill, and splits the deaths
// into the agent's (every process but init) and the whole box's.
func timeDeath(t *testing.T, box []ktest.Proc, init int, kill func() time.Time) deathTimes {
	t.Helper()
	fds := openPidfds(t, box)
	defer closeAll(fds)
	at := kill()
	died, err := waitPidfds(fds, at, 10*time.Second)
	if err != nil {
		for _, p := range box {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		t.Fatalf("%v: %s", err, ktest.Describe(box))
	}
	var d deathTimes
	for i, p := range box {
		d.box = max(d.box, died[i])
		if p.PID != init {
			d.agent = max(d.agent, died[i])
		}
	}
	return d
}

// watcherDeathTrial: the watcher as PID 1 (--control=fd:3, a socket, or
// --control=stdin, pipes as docker and podman attach them) behind a
// stand-in controller holding the only host end of the stream towards
// the watcher; SIGKILL the stand-in.
func watcherDeathTrial(t *testing.T, w string, marker string, mode ktest.ControlMode) deathTimes {
	t.Helper()
	c := ktest.StartController(t, w, ktest.Options{Control: mode, PID1: true, Standin: true})
	c.Launch(shared.Spec{
		Argv: []string{"/bin/busybox", "sh", "-c", treeScript, marker}, Env: []string{"PATH=/usr/bin:/bin"},
		UID: shared.DefaultAgentUID, GID: shared.DefaultAgentGID, Grace: 5 * time.Second,
	})
	if !c.WaitStdout("started", 10*time.Second) {
		t.Fatalf("the agent did not start\n%s", c.Diagnostics())
	}
	ns := c.BoxNamespace(5 * time.Second)
	box, err := stillBox(ns, treeProcs+1, 5*time.Second)
	if err != nil {
		t.Fatalf("watcher: %v\n%s", err, c.Diagnostics())
	}
	init, err := ktest.BoxInit(ns)
	if err != nil {
		t.Fatal(err)
	}
	d := timeDeath(t, box, init.PID, c.KillStandin)
	c.Wait(10 * time.Second)
	return d
}

// bwrapDeathTrial: the same tree in `bwrap --unshare-all
// --die-with-parent`, whose parent (a shell that does not exec it) is
// SIGKILLed.
func bwrapDeathTrial(t *testing.T, bwrap string, marker string) deathTimes {
	t.Helper()
	script := bwrap + ` --unshare-all --die-with-parent --ro-bind / / --dev /dev /bin/busybox sh -c "$1" "$2"; :`
	cmd := exec.Command("/bin/busybox", "sh", "-c", script, "bench-parent", treeScript, marker)
	cmd.Env = ktest.WatcherEnv()
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start bwrap: %v", err)
	}
	parent := cmd.Process.Pid
	defer func() {
		for _, p := range ktest.Descendants(parent) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("bwrap: the agent did not start: %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	self, err := ktest.PIDNamespace(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var ns string
	if !ktest.WaitFor(5*time.Second, func() bool {
		for _, p := range ktest.Descendants(parent) {
			if l, err := ktest.PIDNamespace(p.PID); err == nil && l != self {
				ns = l
				return true
			}
		}
		return false
	}) {
		t.Fatalf("bwrap: no process below %d in a PID namespace of its own", parent)
	}
	box, err := stillBox(ns, treeProcs+1, 5*time.Second)
	if err != nil {
		t.Fatalf("bwrap: %v", err)
	}
	init, err := ktest.BoxInit(ns)
	if err != nil {
		t.Fatal(err)
	}
	return timeDeath(t, box, init.PID, func() time.Time {
		at := time.Now()
		if err := syscall.Kill(parent, syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL bwrap's parent: %v", err)
		}
		return at
	})
}

// TestBenchDeath: SIGKILL of the control stream's holder (the
// supervisor's place: a stand-in that holds the only host end) → the
// last agent process dead, the watcher alone against bwrap
// --die-with-parent, interleaved. The whole chain, a controller whose
// child is the supervisor, is TestBenchSupervisorKill's.
func TestBenchDeath(t *testing.T) {
	requireBench(t)
	ktest.RequireCmd(t, "unshare")
	bwrap := ktest.RequireCmd(t, "bwrap")
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Fatalf("/bin/busybox: %v (install busybox-static; kernel-tests/provision.sh does)", err)
	}
	w := ktest.Build(t).Watcher
	trials := runsFromEnv("DEATHWATCH_BENCH_DEATH_TRIALS", 60)
	s := newSection(t, rankDeath, fmt.Sprintf("death: stream holder SIGKILL → agent tree dead (setsid'd double fork + TERM-ignoring process), %d trials each, interleaved, pidfd exit times", trials),
		"box", "what", "p50", "p95", "p99", "max", "trials > 10 ms")
	var wa, wb, sa, sb, ba, bb []time.Duration
	for i := 0; i < trials; i++ {
		marker := fmt.Sprintf("dwbench-death-%d-%d", os.Getpid(), i)
		d := watcherDeathTrial(t, w, marker+"-w", ktest.ControlFD)
		wa, wb = append(wa, d.agent), append(wb, d.box)
		d = watcherDeathTrial(t, w, marker+"-s", ktest.ControlStdin)
		sa, sb = append(sa, d.agent), append(sb, d.box)
		d = bwrapDeathTrial(t, bwrap, marker+"-b")
		ba, bb = append(ba, d.agent), append(bb, d.box)
	}
	row := func(name, what string, ds []time.Duration) Stats {
		st := summarize(ds)
		s.Row(name, what, fms(st.P50), fms(st.P95), fms(st.P99), fms(st.Max), over10ms(ds))
		s.Set(name+": "+what, st)
		return st
	}
	wst := row("watcher (PID 1, --control=fd:3)", "last agent process dead", wa)
	row("watcher (PID 1, --control=fd:3)", "box dead (+ watcher)", wb)
	sst := row("watcher (PID 1, --control=stdin)", "last agent process dead", sa)
	row("watcher (PID 1, --control=stdin)", "box dead (+ watcher)", sb)
	bst := row("bwrap --unshare-all --die-with-parent", "last agent process dead", ba)
	row("bwrap --unshare-all --die-with-parent", "box dead (+ bwrap init)", bb)
	s.Target("watcher --control=fd:3: stream holder SIGKILL → last agent process dead, p99", wst.P99, 10, "ms")
	s.Target("watcher --control=stdin: stream holder SIGKILL → last agent process dead, p99", sst.P99, 10, "ms")
	s.Set("watcher_over_bwrap_p50", round3(wst.P50/bst.P50))
	s.Note("the stand-in (ktest standin relay, in the supervisor's place; the controller chain is the supervisor SIGKILL section's) holds the only host end of the watcher's control socket (fd) or the only write end of its stdin pipe (stdin); bwrap's parent is a shell that does not exec it; times run from just before kill(2) to the pidfd of each process turning readable")
	s.Note("watcher/bwrap p50 ratio %.2f (bwrap in this run: p50 %s, max %s)", wst.P50/bst.P50, fms(bst.P50), fms(bst.Max))
	s.Log()
}

// over10ms counts the trials slower than the 10 ms target: beside an
// anchor's count it tells the machine's tail from the box's.
func over10ms(ds []time.Duration) string {
	n := 0
	for _, d := range ds {
		if d > 10*time.Millisecond {
			n++
		}
	}
	return fmt.Sprintf("%d/%d", n, len(ds))
}
