package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DemoCmd is `supervisor demo`, the README's first command: an agent
// command runs in a native box and its output and exit code come back;
// then a stand-in controller is SIGKILLed and the demo shows how long
// the agent tree survived and that nothing was left.
type DemoCmd struct {
	Watcher string `help:"Watcher binary (default: watcher next to the supervisor, then PATH)." placeholder:"PATH"`
	Image   string `help:"Rootfs directory for the boxes (default: the host's root, read-only)." placeholder:"DIR"`
}

// Run is `supervisor demo`. Its journal is the global --journal when
// given, else a temporary folder removed at the end.
func (d *DemoCmd) Run(g *Globals, c *cmdContext) error {
	w, err := findWatcher(d.Watcher, c.self)
	if err != nil {
		return err
	}
	return RunDemo(context.Background(), DemoOptions{
		Supervisor: c.self, Watcher: w, Image: d.Image, Journal: g.Journal, Log: g.logger(c.stderr),
	}, c.stdout)
}

// DemoOptions configure RunDemo.
type DemoOptions struct {
	Supervisor string // the supervisor binary to run as the controller
	Runtime    string // "" = supervisor.LocalRuntime(): one with no daemon, that needs no image
	Watcher    string
	Image      string
	Journal    string // "" = a temporary folder
	Log        *slog.Logger
}

// DemoResult is what the demo measured.
type DemoResult struct {
	AgentOutput   string
	AgentCode     int
	BoxProcesses  int           // in the stand-in's box when it was killed
	TreeDead      time.Duration // SIGKILL of the controller → last box process dead
	Remains       []string      // what the box held on the host beyond processes (native as root: its cgroup folders)
	LeftProcesses int
	LeftRemains   int
	LeftOpen      int // open journal entries
}

// demoAgent leaves descendants that ignore SIGTERM and escape into their
// own sessions, the way a careless agent does, then says ready.
const demoAgent = `trap '' TERM; setsid sh -c "trap '' TERM; exec sleep 1000" & sleep 1000 & (trap '' TERM; exec sleep 1000) & echo ready; wait`

const demoInstance = "dw-demo"

// RunDemo runs the demo and writes its report to out.
func RunDemo(ctx context.Context, o DemoOptions, out io.Writer) error {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Runtime == "" {
		o.Runtime = LocalRuntime()
	}
	if o.Runtime == "" {
		return EngineError("the demo needs a runtime without a daemon (native, Linux only); this build has none")
	}
	if o.Journal == "" {
		dir, err := os.MkdirTemp("", "deathwatch-demo-")
		if err != nil {
			return SetupError("demo journal: %v", err)
		}
		defer os.RemoveAll(dir)
		o.Journal = dir
	}
	res, err := runDemo(ctx, o, out)
	if err != nil {
		return err
	}
	if res.LeftProcesses+res.LeftRemains+res.LeftOpen > 0 {
		return SetupError("the demo left %d processes, %d other remains and %d open journal entries", res.LeftProcesses, res.LeftRemains, res.LeftOpen)
	}
	return nil
}

func (o DemoOptions) execArgs(extra ...string) []string {
	a := []string{"exec", "--runtime", o.Runtime, "--instance", demoInstance, "--journal", o.Journal, "--watcher", o.Watcher}
	if o.Image != "" {
		a = append(a, "--image", o.Image)
	}
	if os.Geteuid() == 0 {
		a = append(a, "--memory", "256m", "--pids-limit", "256")
	}
	return append(a, extra...)
}

func runDemo(ctx context.Context, o DemoOptions, out io.Writer) (DemoResult, error) {
	var res DemoResult
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	// 1. An agent command in a box: its output and exit code come back.
	script := `echo "hello from box $(hostname) as uid $(id -u), pid $$ under PID 1 $(tr '\0' ' ' </proc/1/cmdline)"; exit 7`
	cmd := exec.CommandContext(ctx, o.Supervisor, o.execArgs("--", "/bin/sh", "-c", script)...)
	cmd.Stderr = os.Stderr
	start := time.Now()
	b, err := cmd.Output()
	res.AgentOutput = strings.TrimSpace(string(b))
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.AgentCode = ee.ExitCode()
	default:
		return res, SetupError("run %s: %v", o.Supervisor, err)
	}
	say("1. supervisor exec --runtime %s -- sh -c '...; exit 7'  (%v)", o.Runtime, time.Since(start).Round(100*time.Microsecond))
	say("   agent said: %s", res.AgentOutput)
	say("   exit code:  %d (the agent's own, passed through)", res.AgentCode)
	if res.AgentCode != 7 {
		return res, SetupError("the agent's exit code came back as %d, not 7", res.AgentCode)
	}

	// 2. A stand-in controller: SIGKILL it while its agent runs.
	events, evw, err := os.Pipe()
	if err != nil {
		return res, SetupError("events pipe: %v", err)
	}
	defer events.Close()
	ctl := exec.Command(o.Supervisor, o.execArgs("--events", "fd:3", "--", "/bin/sh", "-c", demoAgent)...)
	ctl.ExtraFiles = []*os.File{evw}
	ctl.Stderr = os.Stderr
	stdout, err := ctl.StdoutPipe()
	if err != nil {
		return res, SetupError("%v", err)
	}
	if err := ctl.Start(); err != nil {
		return res, SetupError("start the stand-in controller: %v", err)
	}
	evw.Close()
	defer func() { ctl.Process.Kill(); ctl.Wait() }()
	box, err := demoWaitReady(events, stdout)
	if err != nil {
		return res, err
	}
	initPID := 0
	for _, p := range childrenOf(ctl.Process.Pid) {
		initPID = p
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initPID))
	if initPID == 0 || err != nil {
		return res, SetupError("find the box below the stand-in controller %d: %v", ctl.Process.Pid, err)
	}
	procs := procsInNamespace(ns)
	res.BoxProcesses = len(procs)
	say("2. stand-in controller (pid %d) runs box %s: %d processes, agents that ignore SIGTERM and escaped with setsid", ctl.Process.Pid, box, len(procs))
	killed := time.Now()
	if err := ctl.Process.Signal(syscall.SIGKILL); err != nil {
		return res, SetupError("SIGKILL the stand-in controller: %v", err)
	}
	for {
		alive := 0
		for _, p := range procs {
			if p.alive() {
				alive++
			}
		}
		if alive == 0 {
			res.TreeDead = time.Since(killed)
			break
		}
		if time.Since(killed) > 10*time.Second {
			return res, SetupError("%d box processes still run 10s after the controller's SIGKILL", alive)
		}
		time.Sleep(100 * time.Microsecond)
	}
	ctl.Wait()
	say("   SIGKILL controller -> agent tree dead after %v", res.TreeDead.Round(10*time.Microsecond))

	// 3. A later cleanup: reconcile, as a restarted controller runs it,
	// removes what the killed controller left (its box's empty cgroup
	// and record) and closes its journal entry.
	j, err := OpenJournal(o.Journal, demoInstance)
	if err != nil {
		return res, err
	}
	entries, _, err := j.List()
	if err != nil {
		return res, err
	}
	rt, err := NewRuntime(o.Runtime, RuntimeConfig{Log: o.Log})
	if err != nil {
		return res, err
	}
	remainKind := ""
	for _, e := range entries {
		if r, ok := rt.(Remainer); ok && e.Open() {
			kind, paths := r.Remains(BoxFromEntry(e))
			for _, p := range paths {
				remainKind = kind
				res.Remains = append(res.Remains, p)
				say("   its %s %s is still there; the journal entry is open", kind, p)
			}
		}
	}
	rep, err := Reconcile(ctx, ReconcileOptions{Instance: demoInstance, JournalDir: o.Journal, Runtimes: []string{o.Runtime}, Log: o.Log})
	if err != nil {
		return res, err
	}
	for _, it := range append(append(rep.Removed, rep.Closed...), rep.Blocked...) {
		say("   reconcile: %s %s (%s)", it.Outcome, it.Box, it.Reason)
	}

	// 4. Nothing is left.
	res.LeftProcesses = 0
	for _, p := range procs {
		if p.alive() {
			res.LeftProcesses++
		}
	}
	for _, d := range res.Remains {
		if _, err := os.Stat(d); err == nil {
			res.LeftRemains++
		}
	}
	if entries, _, err = j.List(); err == nil {
		for _, e := range entries {
			if e.Open() {
				res.LeftOpen++
			}
		}
	}
	cg := "nothing of its own beyond its processes (the PID namespace is the kill domain)"
	if len(res.Remains) > 0 {
		cg = fmt.Sprintf("%d %ss", res.LeftRemains, remainKind)
	}
	say("3. left: %d processes, %s, %d open journal entries", res.LeftProcesses, cg, res.LeftOpen)
	return res, nil
}

// demoWaitReady reads --events until the agent is ready and the agent's
// stdout until it said so (its descendants run by then).
func demoWaitReady(events, stdout io.Reader) (box string, err error) {
	type result struct {
		box string
		err error
	}
	done := make(chan result, 2)
	go func() {
		sc := bufio.NewScanner(events)
		for sc.Scan() {
			var ev Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == EventReady {
				done <- result{box: ev.Box}
				io.Copy(io.Discard, events)
				return
			}
		}
		done <- result{err: SetupError("the stand-in controller ended before its agent was ready")}
	}()
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || line != "ready\n" {
			done <- result{err: SetupError("the stand-in's agent did not say ready (%q, %v)", line, err)}
			return
		}
		done <- result{}
		io.Copy(io.Discard, stdout)
	}()
	timeout := time.After(30 * time.Second)
	for i := 0; i < 2; i++ {
		select {
		case r := <-done:
			if r.err != nil {
				return "", r.err
			}
			if r.box != "" {
				box = r.box
			}
		case <-timeout:
			return "", SetupError("the stand-in's agent was not ready after 30s")
		}
	}
	return box, nil
}

// demoProc is a process, by pid and start time (against pid reuse).
type demoProc struct {
	pid   int
	start uint64
}

func (p demoProc) alive() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" {
		return false
	}
	st, _ := strconv.ParseUint(f[19], 10, 64)
	return st == p.start
}

func procsInNamespace(ns string) []demoProc {
	ents, _ := os.ReadDir("/proc")
	var out []demoProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "pid")); err != nil || l != ns {
			continue
		}
		if st, err := ProcStartTime(pid); err == nil {
			out = append(out, demoProc{pid: pid, start: st})
		}
	}
	return out
}

func childrenOf(ppid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}
