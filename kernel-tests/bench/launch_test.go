package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"deathwatch/kernel-tests/ktest"
)

// Inits under test beside the watcher (Debian packages; provision.sh
// installs them).
const (
	tiniStatic = "/usr/bin/tini-static"
	trueBin    = "/bin/true"
)

// runsFromEnv reads a run count override (for a quick try of the
// harness), or returns def.
func runsFromEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// candidate is one command timed in a round-robin.
type candidate struct {
	name   string
	role   string // init | anchor | probe
	argv   []string
	wall   []time.Duration
	cpu    []time.Duration // user+sys of the whole tree (wait4 counts reaped descendants)
	faults []int64         // minor+major page faults of the whole tree, counted the same way
	// adopt: this process is made a child subreaper for each run, and
	// reaps what the command leaves unwaited (bwrap exits without
	// waiting for its box's PID 1), so cpu and faults hold the whole
	// tree; wall still ends when the command exits.
	adopt bool
	// prepare, when set, readies cmd before each run, outside the timed
	// span (podmansplit_test.go: a fresh cidfile, descriptor 3).
	prepare func(cmd *exec.Cmd) error
	stats   Stats
}

// faultsP50 is the median of the candidate's page faults per run.
func (c *candidate) faultsP50() int64 {
	if len(c.faults) == 0 {
		return 0
	}
	v := slices.Clone(c.faults)
	slices.Sort(v)
	return v[(len(v)-1)/2]
}

// sample is what one run of a candidate measured.
type sample struct {
	wall, cpu time.Duration
	faults    int64
}

// add counts a reaped process's rusage into the sample.
func (s *sample) add(ru *syscall.Rusage) {
	s.cpu += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	s.faults += ru.Minflt + ru.Majflt
}

// runOnce runs c to completion and returns its wall time, and the CPU
// time and page faults of its process tree: the waited child's rusage,
// which holds those of every descendant it reaped (a box's PID 1 reaps
// the box's processes; its parent reaps it), and with c.adopt those of
// what it left for a reaper.
func runOnce(c *candidate, env []string) (s sample, err error) {
	var before map[int]bool
	if c.adopt {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return sample{}, os.NewSyscallError("prctl(PR_SET_CHILD_SUBREAPER)", err)
		}
		before = children()
		defer func() {
			if rerr := reapAdopted(before, &s); rerr != nil && err == nil {
				err = rerr
			}
			_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		}()
	}
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = env
	if c.prepare != nil {
		if err := c.prepare(cmd); err != nil {
			return sample{}, err
		}
	}
	t0 := time.Now()
	err = cmd.Run()
	wall := time.Since(t0)
	if err != nil {
		return sample{}, err
	}
	s.wall = wall
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.add(ru)
	}
	return s, nil
}

// children are the processes whose parent is this one.
func children() map[int]bool {
	self, out := os.Getpid(), map[int]bool{}
	for _, p := range ktest.PIDs() {
		if st, err := ktest.ReadStat(p); err == nil && st.PPID == self {
			out[p] = true
		}
	}
	return out
}

// reapAdopted waits for every child of this process that is not in
// before (the orphans a run left to this subreaper) and counts their
// rusage into s. An orphan still running 10 s on fails the run.
func reapAdopted(before map[int]bool, s *sample) error {
	for p := range children() {
		if before[p] {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			var ws syscall.WaitStatus
			var ru syscall.Rusage
			got, err := syscall.Wait4(p, &ws, syscall.WNOHANG, &ru)
			if err != nil {
				return os.NewSyscallError(fmt.Sprintf("wait4(%d)", p), err)
			}
			if got == p {
				s.add(&ru)
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pid %d, left to this process by the run, still runs after 10 s", p)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// roundRobin times every candidate n times, interleaved (A B C A B C
// ...), the starting candidate rotating each round, after warm rounds
// that are not counted. Interleaving spreads whatever else the machine
// does over all candidates alike.
func roundRobin(t *testing.T, cs []*candidate, env []string, warm, n int) {
	t.Helper()
	for r := -warm; r < n; r++ {
		for i := range cs {
			c := cs[(i+max(r, 0))%len(cs)]
			got, err := runOnce(c, env)
			if err != nil {
				cmd := exec.Command(c.argv[0], c.argv[1:]...)
				cmd.Env = env
				if c.prepare != nil {
					_ = c.prepare(cmd)
				}
				out, _ := cmd.CombinedOutput()
				t.Fatalf("%s (%q): %v\n%s", c.name, c.argv, err, out)
			}
			if r >= 0 {
				c.wall = append(c.wall, got.wall)
				c.cpu = append(c.cpu, got.cpu)
				c.faults = append(c.faults, got.faults)
			}
		}
	}
	for _, c := range cs {
		c.stats = summarize(c.wall)
	}
}

var (
	programsMu sync.Mutex
	programs   = map[string]*program{}
)

// program is one probe of kernel-tests/bench, built once per test binary.
type program struct {
	once sync.Once
	path string
	err  error
}

// goinitBin is the goinit probes' binary.
func goinitBin(t *testing.T) string { return benchProgram(t, "goinit") }

// golaunchBin is the Go floor of the native launch (kernel-tests/bench/golaunch).
func golaunchBin(t *testing.T) string { return benchProgram(t, "golaunch") }

// benchProgram builds the probe ./kernel-tests/bench/NAME the way the
// Makefile builds the watcher and the supervisor (static, trimmed,
// stripped, their GOEXPERIMENT): a probe's start-up and page faults
// compare with theirs only when the binaries are made alike.
func benchProgram(t *testing.T, name string) string {
	t.Helper()
	programsMu.Lock()
	p := programs[name]
	if p == nil {
		p = &program{}
		programs[name] = p
	}
	programsMu.Unlock()
	p.once.Do(func() {
		dir, err := os.MkdirTemp("", "deathwatch-bench-")
		if err != nil {
			p.err = err
			return
		}
		p.path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -buildid=", "-o", p.path, "./kernel-tests/bench/"+name)
		cmd.Dir = ktest.RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOEXPERIMENT="+ktest.BuildGOEXPERIMENT)
		if out, err := cmd.CombinedOutput(); err != nil {
			p.err = fmt.Errorf("go build ./kernel-tests/bench/%s: %w\n%s", name, err, out)
		}
	})
	if p.err != nil {
		t.Fatalf("build the %s probe: %v", name, p.err)
	}
	return p.path
}

// baseEnv names a base build to compare against: a folder with the
// supervisor and watcher binaries of an earlier commit (`make build` in
// a worktree there, then DIR is its bin). Every benchmark that measures
// a baseline takes its binaries from it unless its own variable names
// one, and a base supervisor runs with the base watcher.
const baseEnv = "DEATHWATCH_BENCH_BASE"

// baselineBinary is the executable named by the variable env, else the
// file name in the base build (an earlier build, measured interleaved
// with this one's: before and after in one run, at one load); "" when
// neither is set.
func baselineBinary(t *testing.T, env, name string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		if dir := os.Getenv(baseEnv); dir != "" {
			p, env = filepath.Join(dir, name), baseEnv
		}
	}
	if p == "" {
		return ""
	}
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("%s: %s is not an executable file (%v); build the earlier binaries there", env, p, err)
	}
	return p
}

// baseExec is argv (a `supervisor ... exec --watcher W ...` of this
// build) run by the earlier supervisor sup instead, with the base
// build's watcher when there is one.
func baseExec(t *testing.T, sup string, argv []string) []string {
	t.Helper()
	out := append([]string{sup}, argv[1:]...)
	dir := os.Getenv(baseEnv)
	if dir == "" {
		return out
	}
	w := baselineBinary(t, "", "watcher")
	for i := 1; i+1 < len(out); i++ {
		if out[i] == "--watcher" {
			out[i+1] = w
			break
		}
	}
	return out
}

// watcherBaselineEnv names an earlier watcher binary that the launch
// and idle-memory benchmarks measure beside this one.
const watcherBaselineEnv = "DEATHWATCH_BENCH_WATCHER_BASELINE"

// TestBenchLaunch: launch overhead of each init over a bare /bin/true,
// all as PID 1 of a fresh PID namespace.
func TestBenchLaunch(t *testing.T) {
	requireBench(t)
	unshare := ktest.RequireCmd(t, "unshare")
	catatonit := ktest.RequireCmd(t, "catatonit")
	dumbInit := ktest.RequireCmd(t, "dumb-init")
	ktest.RequireCmd(t, tiniStatic)
	w := ktest.Build(t).Watcher
	g := goinitBin(t)
	n := runsFromEnv("DEATHWATCH_BENCH_LAUNCH_RUNS", 300)

	in := func(argv ...string) []string { return append([]string{unshare, "--pid", "--fork"}, argv...) }
	cs := []*candidate{
		{name: "bare /bin/true", role: "anchor", argv: in(trueBin)},
		{name: "tini-static", role: "init", argv: in(tiniStatic, "--", trueBin)},
		{name: "catatonit", role: "init", argv: in(catatonit, "--", trueBin)},
		{name: "dumb-init", role: "init", argv: in(dumbInit, trueBin)},
		{name: "watcher", role: "init", argv: in(w, "--", trueBin)},
		{name: "goinit exit", role: "probe", argv: in(g, "exit")},
		{name: "goinit fork", role: "probe", argv: in(g, "fork", trueBin)},
		{name: "goinit notify-chld", role: "probe", argv: in(g, "notify-chld", trueBin)},
		{name: "goinit notify-7", role: "probe", argv: in(g, "notify-7", trueBin)},
		{name: "goinit notify-all", role: "probe", argv: in(g, "notify-all", trueBin)},
		{name: "goinit notify-async", role: "probe", argv: in(g, "notify-async", trueBin)},
	}
	wbase := baselineBinary(t, watcherBaselineEnv, "watcher")
	if wbase != "" {
		cs = append(cs, &candidate{name: "watcher (baseline)", role: "init", argv: in(wbase, "--", trueBin)})
	}
	s := newSection(t, rankLaunch, fmt.Sprintf("launch: `unshare --pid --fork INIT -- /bin/true`, %d runs each, interleaved", n),
		"candidate", "role", "p50", "p95", "over bare (p50)", "cpu p50", "cpu over bare")
	roundRobin(t, cs, ktest.WatcherEnv(), 10, n)

	bare := cs[0]
	bareCPU := summarize(bare.cpu)
	over := map[string]float64{}
	for _, c := range cs {
		cpu := summarize(c.cpu)
		o, co := c.stats.P50-bare.stats.P50, cpu.P50-bareCPU.P50
		over[c.name] = o
		ov, cov := "—", "—"
		if c != bare {
			ov, cov = fmt.Sprintf("%+.2f ms", o), fmt.Sprintf("%+.2f ms", co)
		}
		s.Row(c.name, c.role, fms(c.stats.P50), fms(c.stats.P95), ov, fms(cpu.P50), cov)
		s.Set(c.name, map[string]any{"role": c.role, "argv": c.argv, "wall": c.stats, "cpu": cpu, "overhead_p50_ms": round3(o)})
	}
	tini := over["tini-static"]
	if tini <= 0 {
		t.Fatalf("tini-static's overhead over a bare /bin/true is %.3f ms: too small to compare against", tini)
	}
	// Issue 33's target: the watcher's overhead at most 0.5 ms above the
	// Go floor (a static Go init that forks and waits); tini's is shown
	// beside it, out of a Go PID 1's reach.
	floor := over["goinit fork"]
	s.Target("watcher overhead − goinit fork overhead (the Go floor), p50", over["watcher"]-floor, 0.5, "ms")
	s.Set("watcher_over_tini", round3(over["watcher"]/tini))
	if o, ok := over["watcher (baseline)"]; ok {
		s.Note("watcher (baseline) is %s: overhead %+.2f ms = %.2fx tini's; %s", wbase, o, o/tini, versus(byName(cs, "watcher").wall, byName(cs, "watcher (baseline)").wall))
	}
	s.Note("Go floor (goinit fork: a static Go init that forks, waits and exits) %+.2f ms = %.2fx tini's overhead; the watcher is %+.2f ms above it, %.2fx tini's overhead", floor, floor/tini, over["watcher"]-floor, over["watcher"]/tini)
	s.Set("go_floor_over_tini", round3(floor/tini))
	s.Set("watcher_over_go_floor_ms", round3(over["watcher"]-floor))
	s.Note("overhead = p50 of the init minus p50 of bare /bin/true under the same unshare; cpu = user+sys of the whole tree")
	s.Note("goinit probes (kernel-tests/bench/goinit): exit = an empty static Go binary; fork = + ForkExec/wait4; notify-chld = + signal.Notify(SIGCHLD); notify-7 = + SIGCHLD, TERM, INT, HUP, QUIT, USR1, USR2; notify-all = + signal.Notify() of every signal; notify-async = SIGCHLD first, the rest in a goroutine (all before the fork)")
	s.Log()
	launchTimelines(t, cs)
}

// launchTimelines runs every candidate again, interleaved, while the
// kernel's process events connector timestamps each fork, exec and exit:
// where each init spends its time before the agent starts and after it
// exits.
func launchTimelines(t *testing.T, cs []*candidate) {
	t.Helper()
	n := runsFromEnv("DEATHWATCH_BENCH_TIMELINE_RUNS", 150)
	s := newSection(t, rankTimeline, fmt.Sprintf("launch timeline from the kernel's process events (cn_proc), %d runs each, interleaved, p50", n),
		"candidate", "init exec→agent fork", "agent fork→exec", "agent exec→exit", "agent exit→init gone", "init exec→gone", "threads before agent/all")
	p, err := openProcEvents()
	if err != nil {
		s.Skip("launch timeline", err.Error())
		s.Log()
		return
	}
	defer p.close()
	type acc struct {
		startup, spawn, agent, exit, total []time.Duration
		before, threads                    []int
		lost                               int
	}
	accs := make([]acc, len(cs))
	env := ktest.WatcherEnv()
	for r := -3; r < n; r++ {
		for i := range cs {
			k := (i + max(r, 0)) % len(cs)
			c := cs[k]
			p.reset()
			cmd := exec.Command(c.argv[0], c.argv[1:]...)
			cmd.Env = env
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			evs, ok := p.waitExit(cmd.Process.Pid, 2*time.Second)
			if overflowed := p.reset(); !ok || overflowed {
				accs[k].lost++
				continue
			}
			if r < 0 {
				continue
			}
			bare := c.name == "bare /bin/true" || c.name == "goinit exit"
			tl, err := timeline(evs, cmd.Process.Pid, !bare)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			a := &accs[k]
			a.total = append(a.total, tl.initExit-tl.initExec)
			a.threads = append(a.threads, tl.threads)
			if !bare {
				a.startup = append(a.startup, tl.agentFork-tl.initExec)
				a.spawn = append(a.spawn, tl.agentExec-tl.agentFork)
				a.agent = append(a.agent, tl.agentExit-tl.agentExec)
				a.exit = append(a.exit, tl.initExit-tl.agentExit)
				a.before = append(a.before, tl.threadsBefore)
			}
		}
	}
	cell := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "—"
		}
		return fms(summarize(ds).P50)
	}
	medInt := func(v []int) int {
		if len(v) == 0 {
			return 0
		}
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	for k, c := range cs {
		a := accs[k]
		threads := fmt.Sprintf("%d/%d", medInt(a.before), medInt(a.threads))
		if len(a.before) == 0 {
			threads = fmt.Sprintf("—/%d", medInt(a.threads))
		}
		s.Row(c.name, cell(a.startup), cell(a.spawn), cell(a.agent), cell(a.exit), cell(a.total), threads)
		s.Set(c.name, map[string]any{
			"init_exec_to_agent_fork": summarize(a.startup), "agent_fork_to_exec": summarize(a.spawn),
			"agent_exec_to_exit": summarize(a.agent), "agent_exit_to_init_gone": summarize(a.exit),
			"init_exec_to_gone": summarize(a.total), "threads_before_agent_p50": medInt(a.before), "threads_p50": medInt(a.threads),
			"runs_lost_to_connector_overflow": a.lost,
		})
	}
	p50 := func(name string, f func(acc) []time.Duration) float64 {
		for k, c := range cs {
			if c.name == name {
				return summarize(f(accs[k])).P50
			}
		}
		return 0
	}
	startup := func(a acc) []time.Duration { return a.startup }
	agentRun := func(a acc) []time.Duration { return a.agent }
	exitPath := func(a acc) []time.Duration { return a.exit }
	s.Note("watcher − tini, p50: start-up %+.2f ms, agent run %+.2f ms (the same /bin/true, slowed by the init's work on the other CPU), agent exit → init gone %+.2f ms",
		p50("watcher", startup)-p50("tini-static", startup), p50("watcher", agentRun)-p50("tini-static", agentRun), p50("watcher", exitPath)-p50("tini-static", exitPath))
	perSig := (p50("goinit notify-all", startup) - p50("goinit notify-chld", startup)) / 60
	s.Note("Go runtime start-up (goinit fork − tini start-up) %+.2f ms; first signal.Notify (notify-chld − fork) %+.2f ms; each further signal %.1f µs ((notify-all − notify-chld)/60; notify-7 − notify-chld = %+.2f ms): os/signal enables each signal with a synchronous round trip to the runtime's signal-mask thread (runtime.sigenable: enableSigChan ← sig; ← maskUpdatedChan, served by ensureSigM's locked thread), two cross-thread wake-ups per signal",
		p50("goinit fork", startup)-p50("tini-static", startup), p50("goinit notify-chld", startup)-p50("goinit fork", startup),
		perSig*1000, p50("goinit notify-7", startup)-p50("goinit notify-chld", startup))
	s.Note("the watcher asks os/signal for none of that unless a signal was blocked at start: its own handler (watcher/rawsig.go) is one rt_sigaction per signal, so its start-up less goinit fork's is what it does before the fork (flags, the pids limit check, the agent's path), not signal round trips; watcher − goinit fork, p50: start-up %+.2f ms, agent exit → init gone %+.2f ms",
		p50("watcher", startup)-p50("goinit fork", startup), p50("watcher", exitPath)-p50("goinit fork", exitPath))
	s.Note("exit path: a Go init that blocks in wait4 (goinit fork) needs %+.2f ms more than tini from the agent's exit to its own; one woken by SIGCHLD through os/signal (goinit notify-chld) %+.2f ms",
		p50("goinit fork", exitPath)-p50("tini-static", exitPath), p50("goinit notify-chld", exitPath)-p50("tini-static", exitPath))
	s.Note("kernel timestamps (CLOCK_MONOTONIC) of unshare's child (the init) and its first child (the agent); for bare /bin/true and goinit exit the init is the command itself; an init is gone when its last thread has exited; threads = clone(CLONE_THREAD) calls by the init")
	s.Log()
}

// quietRun runs a command and returns its combined output on failure.
func quietRun(argv ...string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %w\n%s", argv, err, out.String())
	}
	return nil
}

// nativeTimeline is one `supervisor exec --runtime native -- /bin/true`
// as the kernel's process events connector saw it. built is when the
// box's file system is done and the watcher takes over: the watcher's
// exec after an init stage of the supervisor binary (before issue 16),
// or the watcher binary's own init stage naming its threads "watcher".
type nativeTimeline struct {
	supExec, boxFork, stageExec, built, agentFork, agentExec, agentExit, boxExit, supExit time.Duration
}

// nativeLaunchTimeline picks the supervisor (root), the box's init (the
// child of root that execs: the init stage, which becomes the watcher)
// and the agent (the init's first child process once the box is built)
// out of evs.
func nativeLaunchTimeline(evs []procEvent, root int) (nativeTimeline, error) {
	var tl nativeTimeline
	forks := map[int]time.Duration{} // root's child processes
	box, agent, execs := 0, 0, 0
	for _, e := range evs {
		switch {
		case e.what == procEventExec && e.pid == root && tl.supExec == 0:
			tl.supExec = e.at
		case e.what == procEventFork && e.tgid == root && e.childPID == e.childTGID:
			forks[e.childTGID] = e.at
		case e.what == procEventExec && box == 0 && forks[e.pid] != 0:
			box, tl.boxFork, tl.stageExec, execs = e.pid, forks[e.pid], e.at, 1
		case e.what == procEventExec && box != 0 && e.pid == box:
			execs++
			if execs == 2 && tl.built == 0 {
				tl.built = e.at
			}
		case e.what == procEventComm && box != 0 && e.tgid == box && tl.built == 0:
			tl.built = e.at
		case e.what == procEventFork && tl.built != 0 && e.tgid == box && e.childPID == e.childTGID && agent == 0:
			agent, tl.agentFork = e.childTGID, e.at
		case e.what == procEventExec && agent != 0 && e.pid == agent && tl.agentExec == 0:
			tl.agentExec = e.at
		case e.what == procEventExit && agent != 0 && e.pid == agent && e.tgid == agent:
			tl.agentExit = e.at
		case e.what == procEventExit && box != 0 && e.tgid == box:
			tl.boxExit = max(tl.boxExit, e.at)
		case e.what == procEventExit && e.pid == root && e.tgid == root:
			tl.supExit = e.at
		}
	}
	if tl.supExec == 0 || tl.built == 0 || tl.agentExit == 0 || tl.boxExit == 0 || tl.supExit == 0 {
		return tl, fmt.Errorf("no supervisor exec, box init built (a second exec or a name change), agent and exits among %d events (box %d, %d execs, agent %d)", len(evs), box, execs, agent)
	}
	return tl, nil
}

// TestBenchNativeTimeline: where a native launch spends its time, from
// the kernel's process events, interleaved with bwrap.
func TestBenchNativeTimeline(t *testing.T) {
	requireBench(t)
	bwrap := ktest.RequireCmd(t, "bwrap")
	b := ktest.Build(t)
	dir, err := os.MkdirTemp("", "dw-bench-native-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := runsFromEnv("DEATHWATCH_BENCH_NATIVE_RUNS", 100)
	sup := []string{b.Supervisor, "--instance", fmt.Sprintf("bench-tl-%d", os.Getpid()), "--journal", filepath.Join(dir, "journal"),
		"exec", "--runtime", "native", "--watcher", b.Watcher, "--", trueBin}
	bw := []string{bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", trueBin}
	var base []string // an earlier supervisor, interleaved (DEATHWATCH_BENCH_NATIVE_BASELINE)
	if p := baselineSupervisor(t); p != "" {
		base = baseExec(t, p, sup)
	}
	s := newSection(t, rankTimeline, fmt.Sprintf("native launch timeline from the kernel's process events (cn_proc), %d runs, interleaved with bwrap, p50", n),
		"candidate", "phase", "p50", "this / base (with DEATHWATCH_BENCH_BASE or _NATIVE_BASELINE)")
	p, err := openProcEvents()
	if err != nil {
		t.Fatalf("process events connector: %v", err)
	}
	defer p.close()
	phases := []string{
		"supervisor exec → box clone (journal intent, create: cgroup, id range, journal created; open trees)",
		"box clone → init stage exec",
		"init stage exec → box built (a Go start, the box's file system; baseline: the supervisor binary's, until the watcher's exec)",
		"box built → agent fork (the spec over the control stream; baseline: also the watcher's Go start)",
		"agent fork → agent exit (/bin/true)",
		"agent exit → watcher gone",
		"watcher gone → supervisor exit (journal removing, remove, journal removed)",
		"supervisor exec → exit",
	}
	got := make([][]time.Duration, len(phases))
	gotBase := make([][]time.Duration, len(phases))
	var bwrapTotal []time.Duration
	lost := 0
	env := append(os.Environ(), "HOME=/root")
	for r := -2; r < n; r++ {
		for _, argv := range [][]string{sup, bw, base} {
			if argv == nil {
				continue
			}
			p.reset()
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%q: %v\n%s", argv, err, out)
			}
			evs, ok := p.waitExit(cmd.Process.Pid, 2*time.Second)
			if overflowed := p.reset(); !ok || overflowed {
				lost++
				continue
			}
			if r < 0 {
				continue
			}
			if argv[0] == bwrap {
				var start, end time.Duration
				for _, e := range evs {
					if e.what == procEventExec && e.pid == cmd.Process.Pid && start == 0 {
						start = e.at
					}
					if e.what == procEventExit && e.pid == cmd.Process.Pid && e.tgid == cmd.Process.Pid {
						end = e.at
					}
				}
				if start > 0 && end > start {
					bwrapTotal = append(bwrapTotal, end-start)
				}
				continue
			}
			tl, err := nativeLaunchTimeline(evs, cmd.Process.Pid)
			if err != nil {
				t.Fatalf("native launch: %v", err)
			}
			into := got
			if argv[0] != sup[0] {
				into = gotBase
			}
			for i, d := range []time.Duration{tl.boxFork - tl.supExec, tl.stageExec - tl.boxFork, tl.built - tl.stageExec,
				tl.agentFork - tl.built, tl.agentExit - tl.agentFork, tl.boxExit - tl.agentExit, tl.supExit - tl.boxExit, tl.supExit - tl.supExec} {
				into[i] = append(into[i], d)
			}
		}
	}
	for i, ph := range phases {
		vs := ""
		if base != nil {
			vs = versus(got[i], gotBase[i])
		}
		s.Row("supervisor exec --runtime native -- /bin/true", ph, fms(summarize(got[i]).P50), vs)
		s.Set(ph, summarize(got[i]))
	}
	if base != nil {
		for i, ph := range phases {
			s.Row("baseline "+base[0]+" exec --runtime native -- /bin/true", ph, fms(summarize(gotBase[i]).P50), "")
			s.Set("baseline: "+ph, summarize(gotBase[i]))
		}
	}
	s.Row(strings.Join(bw[:len(bw)-1], " ")+" /bin/true", "exec → exit", fms(summarize(bwrapTotal).P50), "")
	s.Set("bwrap exec → exit", summarize(bwrapTotal))
	s.Set("runs_lost_to_connector_overflow", lost)
	s.Note("kernel timestamps (CLOCK_MONOTONIC); the phases of one run add up to its exec → exit; each p50 is taken on its own, so the p50s need not add up; %d runs lost to connector overflow", lost)
	s.Log()
}
