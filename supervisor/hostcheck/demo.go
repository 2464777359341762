package hostcheck

import (
	"bufio"
	"context"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/internal/autohelp"
	"deathwatch/supervisor/internal/journalbox"
	"deathwatch/supervisor/journal"
	"deathwatch/supervisor/proc"
	"deathwatch/supervisor/reconcile"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"
)

// DemoOptions configure RunDemo.
type DemoOptions struct {
	Supervisor string // the supervisor binary to run as the controller
	Runtime    string // "" = autohelp.Local(): one with no daemon, that needs no image
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
		o.Runtime = autohelp.Local()
	}
	if d, ok := supervisor.Lookup(o.Runtime); !ok || d.Daemon || d.Installed(nil) != nil {
		return exitcode.Engine("the demo needs a runtime without a daemon that works here (native, Linux only)")
	}
	if o.Journal == "" {
		dir, err := os.MkdirTemp("", "deathwatch-demo-")
		if err != nil {
			return exitcode.Setup("demo journal: %w", err)
		}
		defer os.RemoveAll(dir)
		o.Journal = dir
	}
	res, err := runDemo(ctx, o, out)
	if err != nil {
		return err
	}
	if res.LeftProcesses+res.LeftRemains+res.LeftOpen > 0 {
		return exitcode.Setup("the demo left %d processes, %d other remains and %d open journal entries", res.LeftProcesses, res.LeftRemains, res.LeftOpen)
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
	if err := demoExitCode(ctx, o, &res, say); err != nil {
		return res, err
	}

	// 2. A stand-in controller: SIGKILL it while its agent runs.
	s, err := startDemoStandin(o)
	if err != nil {
		return res, err
	}
	defer s.close()
	res.BoxProcesses = len(s.procs)
	say("2. stand-in controller (pid %d) runs supervisor exec (pid %d) as its child, box %s: %d processes, agents that ignore SIGTERM and escaped with setsid", s.ctl.Process.Pid, s.sup, s.box, len(s.procs))
	j, err := journal.Open(o.Journal, demoInstance, supervisor.Volatile)
	if err != nil {
		return res, err
	}
	remainKind, err := demoRemains(o, j, &res)
	if err != nil {
		return res, err
	}
	killed := time.Now()
	if err := s.killController(killed, &res); err != nil {
		return res, err
	}
	say("   SIGKILL controller -> agent tree dead after %v, box removed after %v", res.TreeDead.Round(10*time.Microsecond), time.Since(killed).Round(10*time.Microsecond))

	// 3. A later cleanup: reconcile, as a restarted controller runs it,
	// removes what a killed supervisor leaves (its box's empty cgroup and
	// record) and closes its journal entry; after a controller's death
	// the supervisor removed them itself.
	if err := demoReconcile(ctx, o, res.Remains, remainKind, say); err != nil {
		return res, err
	}

	// 4. Nothing is left.
	demoLeft(j, s.procs, &res)
	cg := "nothing of its own beyond its processes (the PID namespace is the kill domain)"
	if len(res.Remains) > 0 {
		cg = fmt.Sprintf("%d %ss", res.LeftRemains, remainKind)
	}
	say("3. left: %d processes, %s, %d open journal entries", res.LeftProcesses, cg, res.LeftOpen)
	return res, nil
}

// demoExitCode runs an agent command in a box and checks that its output
// and exit code come back.
func demoExitCode(ctx context.Context, o DemoOptions, res *DemoResult, say func(string, ...any)) error {
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
		return exitcode.Setup("run %s: %w", o.Supervisor, err)
	}
	say("1. supervisor exec --runtime %s -- sh -c '...; exit 7'  (%v)", o.Runtime, time.Since(start).Round(100*time.Microsecond))
	say("   agent said: %s", res.AgentOutput)
	say("   exit code:  %d (the agent's own, passed through)", res.AgentCode)
	if res.AgentCode != 7 {
		return exitcode.Setup("the agent's exit code came back as %d, not 7", res.AgentCode)
	}
	return nil
}

// demoStandin is the demo's stand-in controller, a separate process (sh)
// that runs `supervisor exec` as its child, and what the host sees of
// its supervisor and box.
type demoStandin struct {
	ctl      *exec.Cmd // nil until it started
	events   *os.File
	box      string
	sup      int    // the supervisor's pid
	supStart uint64 // and start time
	procs    []proc.Proc
}

// startDemoStandin starts the stand-in controller and waits until its
// agent is ready.
func startDemoStandin(o DemoOptions) (_ *demoStandin, err error) {
	events, evw, err := os.Pipe()
	if err != nil {
		return nil, exitcode.Setup("events pipe: %w", err)
	}
	s := &demoStandin{events: events}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	ctl := exec.Command("sh", controllerArgs(o.Supervisor, o.execArgs("--events", "fd:3", "--", "/bin/sh", "-c", demoAgent))...)
	ctl.ExtraFiles = []*os.File{evw}
	ctl.Stderr = os.Stderr
	stdout, err := ctl.StdoutPipe()
	if err != nil {
		return nil, exitcode.Setup("%w", err)
	}
	if err := ctl.Start(); err != nil {
		return nil, exitcode.Setup("start the stand-in controller: %w", err)
	}
	evw.Close()
	s.ctl = ctl
	if s.box, err = demoWaitReady(events, stdout); err != nil {
		return nil, err
	}
	if err := s.findBox(); err != nil {
		return nil, err
	}
	return s, nil
}

// findBox finds the stand-in's supervisor and the processes of its box.
func (s *demoStandin) findBox() error {
	initPID := 0
	for _, p := range proc.Children(s.ctl.Process.Pid) {
		s.sup = p
	}
	for _, p := range proc.Children(s.sup) {
		initPID = p
	}
	ns, err := proc.PIDNamespace(initPID)
	if initPID == 0 || err != nil {
		return exitcode.Setup("find the box below the supervisor %d of the stand-in controller %d: %w", s.sup, s.ctl.Process.Pid, err)
	}
	s.procs = proc.InNamespace(ns)
	s.supStart, _ = proc.StartTime(s.sup)
	return nil
}

// killController SIGKILLs the stand-in controller and waits until its
// box's processes are dead and its supervisor, which removes the box
// and then exits, is gone.
func (s *demoStandin) killController(killed time.Time, res *DemoResult) error {
	if err := s.ctl.Process.Kill(); err != nil {
		return exitcode.Setup("SIGKILL the stand-in controller: %w", err)
	}
	for {
		alive := 0
		for _, p := range s.procs {
			if p.Alive() {
				alive++
			}
		}
		if alive == 0 {
			res.TreeDead = time.Since(killed)
			break
		}
		if time.Since(killed) > 10*time.Second {
			return exitcode.Setup("%d box processes still run 10s after the controller's SIGKILL", alive)
		}
		time.Sleep(100 * time.Microsecond)
	}
	s.ctl.Wait()
	if _, left := proc.WaitDead([]proc.Proc{{PID: s.sup, Start: s.supStart}}, killed.Add(60*time.Second)); len(left) > 0 {
		return exitcode.Setup("the supervisor %d still runs 60s after its controller's SIGKILL", s.sup)
	}
	return nil
}

// close kills the stand-in controller, if it runs, and closes its events.
func (s *demoStandin) close() {
	if s.ctl != nil {
		s.ctl.Process.Kill()
		s.ctl.Wait()
	}
	s.events.Close()
}

// demoRemains records in res what the open boxes of the journal have of
// their own beyond their processes (native: their cgroups), to check
// that nothing of them is left, and returns what kind of thing that is.
func demoRemains(o DemoOptions, j *journal.Journal, res *DemoResult) (kind string, err error) {
	entries, _, err := j.List()
	if err != nil {
		return "", err
	}
	rt, err := supervisor.NewRuntime(o.Runtime, supervisor.RuntimeConfig{Log: o.Log})
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if r, ok := rt.(Remainer); ok && e.Open() {
			if k, paths := r.Remains(journalbox.FromEntry(e)); len(paths) > 0 {
				kind = k
				res.Remains = append(res.Remains, paths...)
			}
		}
	}
	return kind, nil
}

// demoReconcile says which remains are still there and runs reconcile
// as a restarted controller does.
func demoReconcile(ctx context.Context, o DemoOptions, remains []string, kind string, say func(string, ...any)) error {
	for _, d := range remains {
		if _, err := os.Stat(d); err == nil {
			say("   its %s is still there (%s); the journal entry is open", kind, d)
		}
	}
	rep, err := reconcile.Run(ctx, reconcile.Options{Instance: demoInstance, JournalDir: o.Journal, Runtimes: []string{o.Runtime}, Log: o.Log})
	if err != nil {
		return err
	}
	for _, it := range append(append(rep.Removed, rep.Closed...), rep.Blocked...) {
		say("   reconcile: %s %s (%s)", it.Outcome, it.Box, it.Reason)
	}
	return nil
}

// demoLeft counts in res the box's processes still alive, its remains
// still there and the journal's entries still open.
func demoLeft(j *journal.Journal, procs []proc.Proc, res *DemoResult) {
	res.LeftProcesses = 0
	for _, p := range procs {
		if p.Alive() {
			res.LeftProcesses++
		}
	}
	for _, d := range res.Remains {
		if _, err := os.Stat(d); err == nil {
			res.LeftRemains++
		}
	}
	if entries, _, err := j.List(); err == nil {
		for _, e := range entries {
			if e.Open() {
				res.LeftOpen++
			}
		}
	}
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
			var ev supervisor.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == supervisor.EventReady {
				done <- result{box: ev.Box}
				io.Copy(io.Discard, events)
				return
			}
		}
		done <- result{err: exitcode.Setup("the stand-in controller ended before its agent was ready")}
	}()
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || line != "ready\n" {
			done <- result{err: exitcode.Setup("the stand-in's agent did not say ready (%q, %w)", line, err)}
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
			return "", exitcode.Setup("the stand-in's agent was not ready after 30s")
		}
	}
	return box, nil
}
