// Package bench holds the benchmarks `make bench` runs (DEATHWATCH_BENCH=1):
// figures side by side with a reference, printed, never pass/fail timings.
package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor"
)

func requireBench(t *testing.T) {
	t.Helper()
	if os.Getenv("DEATHWATCH_BENCH") != "1" {
		t.Skip("benchmarks run under `make bench` (DEATHWATCH_BENCH=1)")
	}
	ktest.RequireRoot(t)
}

type stats struct{ p50, p95, p99, max, mean time.Duration }

func summarize(ds []time.Duration) stats {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(p float64) time.Duration { return s[int(p*float64(len(s)-1)+0.5)] }
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return stats{p50: at(.5), p95: at(.95), p99: at(.99), max: s[len(s)-1], mean: sum / time.Duration(len(s))}
}

func (s stats) String() string {
	r := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	return fmt.Sprintf("p50 %s  p95 %s  p99 %s  max %s  mean %s", r(s.p50), r(s.p95), r(s.p99), r(s.max), r(s.mean))
}

// Launch time of `supervisor exec --runtime native -- /bin/true` against
// `bwrap --unshare-all --die-with-parent --ro-bind / / /bin/true`,
// interleaved in one run (target ratio ≤ 1.5).
func TestBenchNativeLaunch(t *testing.T) {
	requireBench(t)
	bins := ktest.Build(t)
	bwrap := ktest.RequireCmd(t, "bwrap")
	journal := t.TempDir()
	cmds := map[string][]string{
		"native": {bins.Supervisor, "exec", "--runtime", "native", "--journal", journal, "--watcher", bins.Watcher, "--", "/bin/true"},
		"bwrap":  {bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "/bin/true"},
	}
	const warmup, runs = 5, 60
	times := map[string][]time.Duration{}
	for i := 0; i < warmup+runs; i++ {
		for _, name := range []string{"native", "bwrap"} {
			argv := cmds[name]
			start := time.Now()
			out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
			d := time.Since(start)
			if err != nil {
				t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
			}
			if i >= warmup {
				times[name] = append(times[name], d)
			}
		}
	}
	n, b := summarize(times["native"]), summarize(times["bwrap"])
	t.Logf("launch, %d runs each, interleaved:", runs)
	t.Logf("  supervisor exec --runtime native -- /bin/true: %s", n)
	t.Logf("  bwrap --unshare-all --die-with-parent --ro-bind / / /bin/true: %s", b)
	t.Logf("  ratio (p50) %.2f, (mean) %.2f (target ≤ 1.5)", float64(n.p50)/float64(b.p50), float64(n.mean)/float64(b.mean))
}

// benchAgent forks descendants that ignore TERM and leave the session.
const benchAgent = `trap '' TERM; setsid sh -c "trap '' TERM; exec sleep 1000" & sleep 1000 & echo ready; wait`

// killOnce starts controller (whose stdout carries the agent's "ready"),
// SIGKILLs the process that holds the box (holder, or the controller),
// and returns the time until the last box process is dead.
func killOnce(t *testing.T, argv []string, holderIsChild bool) time.Duration {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		cmd.Process.Kill()
		t.Fatalf("%s: agent not ready: %q %v", argv[0], line, err)
	}
	ctl := cmd.Process.Pid
	// The agent's PID namespace: the deepest descendant that is not in ours.
	self, _ := ktest.PIDNamespace(os.Getpid())
	var ns string
	desc := ktest.Descendants(ctl)
	for _, p := range desc {
		if l, err := ktest.PIDNamespace(p.PID); err == nil && l != self {
			ns = l
		}
	}
	if ns == "" {
		cmd.Process.Kill()
		t.Fatalf("%s: no box PID namespace below %d", argv[0], ctl)
	}
	box := ktest.InNamespace(ns)
	// Processes of the box that live outside its namespace (bwrap's monitor).
	for _, p := range desc {
		if l, _ := ktest.PIDNamespace(p.PID); l == self {
			box = append(box, p)
		}
	}
	start := time.Now()
	syscall.Kill(ctl, syscall.SIGKILL)
	took, left := ktest.WaitDead(box, start, 5*time.Second)
	if len(left) > 0 {
		for _, p := range left {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
		t.Fatalf("%s: %s alive %v after SIGKILL of the controller", argv[0], ktest.Describe(left), took)
	}
	return took
}

// Controller SIGKILL → last agent process dead, native against bwrap
// --die-with-parent (bwrap anchor measured here: p50 1.44 ms, max 2.8 ms;
// target p99 ≤ 10 ms).
func TestBenchNativeKill(t *testing.T) {
	requireBench(t)
	bins := ktest.Build(t)
	bwrap := ktest.RequireCmd(t, "bwrap")
	journal := t.TempDir()
	native := []string{bins.Supervisor, "exec", "--runtime", "native", "--journal", journal, "--watcher", bins.Watcher, "--pids-limit", "100", "--", "/bin/sh", "-c", benchAgent}
	// The controller of bwrap is the shell that started it (`; :` keeps
	// the shell from exec'ing bwrap).
	bw := []string{"/bin/sh", "-c", bwrap + ` --unshare-all --die-with-parent --ro-bind / / --dev /dev /bin/sh -c "$0"; :`, benchAgent}
	const trials = 30
	var nt, bt []time.Duration
	for i := 0; i < trials; i++ {
		nt = append(nt, killOnce(t, native, false))
		bt = append(bt, killOnce(t, bw, true))
	}
	t.Logf("controller SIGKILL -> last agent process dead, %d trials each, interleaved:", trials)
	t.Logf("  native (supervisor SIGKILLed): %s", summarize(nt))
	t.Logf("  bwrap --die-with-parent (parent SIGKILLed): %s", summarize(bt))
	t.Logf("  target: p99 ≤ 10ms")
	// The killed supervisors left their (empty) cgroups for a later
	// cleanup: remove them the way reconcile does.
	j, err := supervisor.OpenJournal(journal, "default")
	if err != nil {
		t.Fatal(err)
	}
	es, _, err := j.List()
	if err != nil {
		t.Fatal(err)
	}
	rt := supervisor.NewNative(nil, supervisor.NativeOptions{})
	for _, e := range es {
		if err := rt.Remove(context.Background(), &supervisor.Box{Name: e.Box, State: e.RuntimeState}); err != nil {
			t.Errorf("remove %s: %v", e.Box, err)
		}
	}
	t.Logf("removed the %d boxes the killed supervisors left", len(es))
}
