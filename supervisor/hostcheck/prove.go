// Package hostcheck holds the verbs that check a host rather than run
// an agent: prove-deathwatch (kill a stand-in controller and measure how
// fast its box dies and is removed), doctor (runtimes, watcher, staging
// probe and the proof) and the demo. They drive the lifecycle library
// and the runtimes through the registry, never by name.
package hostcheck

import (
	"bufio"
	"bytes"
	"context"
	"deathwatch/supervisor"
	"deathwatch/supervisor/proc"
	"deathwatch/supervisor/reconcile"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/internal/launchid"
	"deathwatch/supervisor/internal/survival"
)

// Proof paths.
const (
	// PathController: the stand-in controller (a shell that runs
	// `supervisor exec` as its fork+exec child, as subprocess and os/exec
	// do) is SIGKILLed: the supervisor sees its parent die and ends the box.
	PathController = "controller"
	PathSIGKILL    = "sigkill"   // the stand-in supervisor is SIGKILLed: the watcher sees EOF
	PathHeartbeat  = "heartbeat" // the stand-in is frozen (SIGSTOP): the watcher hears nothing for --heartbeat
	PathDeadline   = "deadline"  // the stand-in is frozen and the agent ignores TERM: the in-box deadline ends it
)

// The heartbeat and deadline paths' settings when not given (doctor
// uses these). A heartbeat much below 1s risks killing a healthy box on
// a busy host, where an engine's attach chain (rootless podman's) can
// delay pings by a good part of a second.
const (
	DefaultProveHeartbeat = time.Second
	DefaultProveDeadline  = time.Second
	DefaultProveGrace     = 500 * time.Millisecond
)

// ProvePaths are all paths, in the order they run.
var ProvePaths = []string{PathController, PathSIGKILL, PathHeartbeat, PathDeadline}

// ProveOptions is `supervisor prove-deathwatch` as plain data.
type ProveOptions struct {
	Self       string // the supervisor binary that runs as the stand-in controller
	Instance   string // the stand-ins' instance (boxes and journal)
	JournalDir string
	Runtime    string
	Image      string
	Trials     int
	Paths      []string
	Bounds     supervisor.Bounds
	Heartbeat  time.Duration // heartbeat path
	Deadline   time.Duration // deadline path
	Grace      time.Duration // deadline path
	// Strict holds every trial to the bound alone, with no allowance
	// for the host's own wake-up delay (hostdelay.go) or its slow CPU
	// (cpuspeed.go).
	Strict bool

	AllowRootful   bool
	Watcher        string
	WatcherInImage string
	EngineEnv      []string // the stand-in's environment; nil: os.Environ()
	Log            *slog.Logger
}

// ProveRow is one path × measure.
type ProveRow struct {
	Path     string        `json:"path"`
	Measure  string        `json:"measure"` // agent-dead | box-removed
	Bound    time.Duration `json:"bound_ns"`
	BoundStr string        `json:"bound"`
	N        int           `json:"trials"`
	P50      time.Duration `json:"p50_ns"`
	P95      time.Duration `json:"p95_ns"`
	Max      time.Duration `json:"max_ns"`
	Pass     bool          `json:"pass"`
	Failures []string      `json:"failures,omitempty"`
	// HostDelay is the worst wake-up delay the host gave the prover
	// during a trial of this row; Loaded lists the trials that passed
	// only with the allowance for it.
	HostDelay time.Duration `json:"host_delay_ns"`
	Loaded    []string      `json:"loaded,omitempty"`
	// CPUAllowance is what a trial of this row may take past the bound
	// for the host's slow CPU (ProveReport.CPU): the kill chain's part
	// of the bound, factor − 1 times over; 0 when not applied.
	CPUAllowance time.Duration `json:"cpu_allowance_ns,omitempty"`

	cpuFactor float64
	samples   []time.Duration
}

// ProveVersion is the version of prove-deathwatch --json's format
// (docs/schemas/prove-deathwatch.v1.json).
const ProveVersion = 1

// ProveReport is the result of prove-deathwatch.
type ProveReport struct {
	V       int        `json:"v"` // ProveVersion
	Runtime string     `json:"runtime"`
	Image   string     `json:"image,omitempty"`
	Trials  int        `json:"trials"`
	Rows    []ProveRow `json:"rows"`
	Pass    bool       `json:"pass"`
	// Error is why the proof could not run at all (the stand-in did not
	// start: no engine, no image, ...); Code is its exit status then.
	Error string `json:"error,omitempty"`
	Code  int    `json:"-"`
	// Defaults says what a controller gets from exec's default bounds
	// on this host: the frozen controller's bound takes the heartbeat
	// path's measured slack (or the runtime's dead bound).
	Defaults string `json:"defaults,omitempty"`
	// Notes says what the proof changed to run on this host (a deadline
	// raised because the host could not see a box before it ended).
	Notes []string `json:"notes,omitempty"`
	// CPU is the CPU-speed reference measured before the first trial
	// (cpuspeed.go); nil when the proof did not get that far.
	CPU *CPUSpeed `json:"cpu,omitempty"`
}

// errUnseen: the deadline path's box ended (by its deadline) before the
// prover could list its processes: the host is slower to show a box
// than the deadline is long, and the trial proves nothing either way.
var errUnseen = errors.New("the box ended before its processes could be listed")

// errNoPID1: the runtime lists the box but it has no PID 1 the host can
// see (it ended, on a runtime whose boxes' processes are the host's).
var errNoPID1 = errors.New("no PID 1 on the host")

// unseenCeiling: the deadline path quadruples its deadline after each
// unseen box until it would pass this; then the proof gives up (no host
// that needs a minute to list a box's processes can prove anything).
const unseenCeiling = time.Minute

// proveAgent forks a setsid'd and a TERM-ignoring descendant, says it
// is armed, and sleeps. For the deadline path every process ignores TERM.
const (
	proveAgent         = `setsid sleep 3600 & (trap '' TERM; exec sleep 3600) & echo armed; exec sleep 3600`
	proveAgentDeadline = `trap '' TERM; setsid sleep 3600 & (trap '' TERM; exec sleep 3600) & echo armed; exec sleep 3600`
)

// proveMarkerEnv names the variable the stand-in passes to its agent
// (a random value per trial) on a runtime whose processes the host
// cannot see.
const proveMarkerEnv = "DEATHWATCH_PROVE_MARKER"

// standinArgs is the stand-in controller's argv (without the binary):
// a plain `supervisor exec` of the agent for path.
func standinArgs(o *ProveOptions, path string) []string {
	a := []string{"--instance", o.Instance, "--journal", o.JournalDir, "--log-level", "warn",
		"exec", "--runtime", o.Runtime, "--events", "fd:3"}
	if o.Image != "" {
		a = append(a, "--image", o.Image)
	}
	if o.AllowRootful {
		a = append(a, "--allow-rootful")
	}
	desc, _ := supervisor.Lookup(o.Runtime)
	if o.WatcherInImage != "" {
		a = append(a, "--watcher-in-image", o.WatcherInImage)
	} else if o.Watcher != "" && desc.ImageWatcher == "" {
		a = append(a, "--watcher", o.Watcher)
	}
	if desc.Has(supervisor.CapNoHostProcesses) {
		// The agent's processes carry it in their environment: the
		// runtime counts them from inside the box.
		a = append(a, "--env", proveMarkerEnv)
	}
	agent := proveAgent
	switch path {
	case PathHeartbeat:
		a = append(a, "--heartbeat", o.Heartbeat.String())
	case PathDeadline:
		a = append(a, "--deadline", o.Deadline.String(), "--grace", o.Grace.String())
		agent = proveAgentDeadline
	}
	return append(a, "--", "sh", "-c", agent)
}

// controllerArgs is the controller path's stand-in: sh runs the
// supervisor as its child (a command after it keeps sh from exec'ing
// it) and waits, a controller in a few bytes.
func controllerArgs(self string, args []string) []string {
	return append([]string{"-c", `"$@"; exit $?`, "sh", self}, args...)
}

// deadBound is the agent-dead bound of a path.
func (o *ProveOptions) deadBound(path string) (time.Duration, string) {
	return o.pathBound(path, o.Bounds.Dead)
}

// removedBound is the box-removed bound of a path.
func (o *ProveOptions) removedBound(path string) (time.Duration, string) {
	return o.pathBound(path, o.Bounds.Removed)
}

// pathBound adds what the path waits for on purpose (the heartbeat, or
// the deadline and its grace) to bound, and says how it was made.
func (o *ProveOptions) pathBound(path string, bound time.Duration) (time.Duration, string) {
	switch path {
	case PathHeartbeat:
		return o.Heartbeat + bound, fmt.Sprintf("%v+%v", o.Heartbeat, bound)
	case PathDeadline:
		return o.Deadline + o.Grace + bound, fmt.Sprintf("%v+%v+%v", o.Deadline, o.Grace, bound)
	}
	return bound, bound.String()
}

// FrozenSlack is what a frozen controller's box may live past the
// heartbeat on this host: the kill chain's time as measured — the
// sigkill path's agent-dead maximum, or what the heartbeat path took past
// its heartbeat (measured from the freeze, which can be later than the
// last ping) — rounded to the millisecond; def when neither ran.
func (rep *ProveReport) FrozenSlack(heartbeat, def time.Duration) time.Duration {
	slack, measured := time.Duration(0), false
	for _, r := range rep.Rows {
		switch {
		case r.Measure != "agent-dead" || r.N == 0:
		case r.Path == PathSIGKILL || r.Path == PathController:
			slack, measured = max(slack, r.Max), true
		case r.Path == PathHeartbeat:
			slack, measured = max(slack, r.Max-heartbeat), true
		}
	}
	if !measured {
		slack = def
	}
	return slack.Round(time.Millisecond)
}

// Prove runs the proof. An error is returned only for bad options; a
// proof that cannot run is a report with Error and Code set.
func Prove(ctx context.Context, o ProveOptions) *ProveReport {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	rep := &ProveReport{V: ProveVersion, Runtime: o.Runtime, Image: o.Image, Trials: o.Trials, Pass: true}
	// What exec's defaults give a controller here.
	defer func() {
		s := survival.Limits{Heartbeat: supervisor.DefaultHeartbeat, Deadline: supervisor.DefaultDeadline, Grace: supervisor.DefaultGrace}
		rep.Defaults = s.Statement(rep.FrozenSlack(o.Heartbeat, o.Bounds.Dead))
	}()
	if d, _ := supervisor.Lookup(o.Runtime); d.Has(supervisor.CapNoHostProcesses) {
		rt, err := supervisor.NewRuntime(o.Runtime, supervisor.RuntimeConfig{Log: o.Log, EngineEnv: o.EngineEnv})
		if _, ok := rt.(ProcessCounter); err == nil && !ok {
			// Refused rather than half measured: a box-removed time alone
			// says nothing about when the agent died.
			rep.Pass, rep.Code = false, shared.ExitRefused
			rep.Error = fmt.Sprintf("runtime %s runs a box's processes where this host cannot see them (no host pid) and cannot count them from inside: the agent-dead bound cannot be measured", o.Runtime)
			return rep
		}
	}
	cpu := measureCPU(ctx, &o)
	rep.CPU = &cpu
	for _, path := range o.Paths {
		po := o // the deadline path may raise its deadline (errUnseen)
		b, bs := po.deadBound(path)
		dead := ProveRow{Path: path, Measure: "agent-dead", Bound: b, BoundStr: bs, Pass: true}
		b, bs = po.removedBound(path)
		removed := ProveRow{Path: path, Measure: "box-removed", Bound: b, BoundStr: bs, Pass: true}
		if cpu.Applied {
			// Only the kill chain's part of a bound is CPU work; what a
			// path waits for on purpose (heartbeat, deadline) is a timer.
			dead.cpuFactor, dead.CPUAllowance = cpu.Factor, cpuAllowance(o.Bounds.Dead, cpu.Factor)
			removed.cpuFactor, removed.CPUAllowance = cpu.Factor, cpuAllowance(o.Bounds.Removed, cpu.Factor)
		}
		for i := 0; i < o.Trials; i++ {
			tr, err := proveTrial(ctx, &po, path)
			if errors.Is(err, errUnseen) && 4*po.Deadline <= unseenCeiling {
				// A longer deadline proves the same mechanism; the row's
				// bound follows it, and the report says why.
				from := po.Deadline
				po.Deadline *= 4
				dead.Bound, dead.BoundStr = po.deadBound(path)
				removed.Bound, removed.BoundStr = po.removedBound(path)
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s trial %d: the box ended by its %v deadline before this host listed its processes; the deadline was raised to %v and the trial run again", path, i+1, from, po.Deadline))
				i--
				continue
			}
			if err != nil {
				rep.Pass = false
				rep.Error = fmt.Sprintf("%s trial %d: %v", path, i+1, err)
				rep.Code = exitcode.Of(err, shared.ExitSetupFailed)
				dead.finish()
				removed.finish()
				rep.Rows = append(rep.Rows, dead, removed)
				return rep
			}
			allow := hopsAllowed * tr.hostDelay
			if o.Strict {
				allow = 0
			}
			dead.record(i, tr.dead, tr.deadLeft, tr.hostDelay, allow)
			removed.record(i, tr.removed, tr.removedLeft, tr.hostDelay, allow)
			o.Log.Info("prove trial", "path", path, "trial", i+1, "procs", tr.procs, "dead", tr.dead, "removed", tr.removed)
		}
		dead.finish()
		removed.finish()
		rep.Pass = rep.Pass && dead.Pass && removed.Pass
		rep.Rows = append(rep.Rows, dead, removed)
	}
	return rep
}

// record adds trial i's time d; left is what was still there at the
// end of the wait. A trial over the bound passes only when the host's
// slow CPU (r.CPUAllowance) and its own wake-up delay, measured in that
// trial (allow; 0 under --strict), explain the excess.
func (r *ProveRow) record(i int, d time.Duration, left string, hostDelay, allow time.Duration) {
	r.N++
	r.samples = append(r.samples, d)
	r.HostDelay = max(r.HostDelay, hostDelay)
	switch {
	case left != "":
		r.Pass = false
		r.Failures = append(r.Failures, fmt.Sprintf("trial %d: left behind: %s", i+1, left))
	case d <= r.Bound:
	case d <= r.Bound+r.CPUAllowance+allow:
		var why []string
		if r.CPUAllowance > 0 {
			why = append(why, fmt.Sprintf("%v for a CPU %.1f× slower than the reference", r.CPUAllowance, r.cpuFactor))
		}
		if allow > 0 {
			why = append(why, fmt.Sprintf("%d × the host's wake-up delay of %v in that trial", hopsAllowed, hostDelay.Round(time.Microsecond)))
		}
		r.Loaded = append(r.Loaded, fmt.Sprintf("trial %d: %v exceeds the bound %s by %v, within %s",
			i+1, d.Round(time.Microsecond), r.BoundStr, (d-r.Bound).Round(time.Microsecond), strings.Join(why, " + ")))
	default:
		r.Pass = false
		r.Failures = append(r.Failures, fmt.Sprintf("trial %d: %v exceeds the bound %s (the host's wake-up delay in that trial: %v)", i+1, d.Round(time.Microsecond), r.BoundStr, hostDelay.Round(time.Microsecond)))
	}
}

func (r *ProveRow) finish() {
	if len(r.samples) == 0 {
		r.Pass = false
		return
	}
	r.P50, r.P95, r.Max = percentileOf(r.samples, .50), percentileOf(r.samples, .95), percentileOf(r.samples, 1)
}

// percentileOf is the nearest-rank percentile p (0..1) of ds.
func percentileOf(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	i := int(float64(len(s)-1)*p + 0.5)
	return s[i]
}

// trialResult is one trial's measurements.
type trialResult struct {
	procs                 int
	dead, removed         time.Duration
	deadLeft, removedLeft string        // what was still there at the bound's end
	hostDelay             time.Duration // the worst wake-up delay during the trial
}

// standin is one running stand-in controller.
type standin struct {
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	events []supervisor.Event
	change chan struct{}
}

type standinWriter struct {
	s   *standin
	buf *bytes.Buffer
}

func (w standinWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.notify()
	if w.buf.Len() < 1<<20 {
		w.buf.Write(p)
	}
	return len(p), nil
}

func (s *standin) notify() {
	close(s.change)
	s.change = make(chan struct{})
}

func startStandin(o *ProveOptions, path, marker string) (*standin, error) {
	evR, evW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("events pipe: %w", err)
	}
	s := &standin{done: make(chan struct{}), change: make(chan struct{})}
	s.cmd = exec.Command(o.Self, standinArgs(o, path)...)
	if path == PathController {
		s.cmd = exec.Command("sh", controllerArgs(o.Self, standinArgs(o, path))...)
	}
	s.cmd.Env = o.EngineEnv
	if marker != "" {
		if s.cmd.Env == nil {
			s.cmd.Env = os.Environ()
		}
		s.cmd.Env = append(s.cmd.Env[:len(s.cmd.Env):len(s.cmd.Env)], proveMarkerEnv+"="+marker)
	}
	s.cmd.Stdout = standinWriter{s, &s.stdout}
	s.cmd.Stderr = standinWriter{s, &s.stderr}
	s.cmd.ExtraFiles = []*os.File{evW} // fd 3
	if err := s.cmd.Start(); err != nil {
		evR.Close()
		evW.Close()
		return nil, fmt.Errorf("start the stand-in controller %s: %w", o.Self, err)
	}
	evW.Close()
	go func() {
		sc := bufio.NewScanner(evR)
		for sc.Scan() {
			var ev supervisor.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				s.mu.Lock()
				s.events = append(s.events, ev)
				s.notify()
				s.mu.Unlock()
			}
		}
		evR.Close()
	}()
	go func() {
		s.cmd.Wait()
		s.mu.Lock()
		close(s.done)
		s.notify()
		s.mu.Unlock()
	}()
	return s, nil
}

func (s *standin) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// waitArmed waits for the ready event and the agent's "armed" line.
func (s *standin) waitArmed(timeout time.Duration) (supervisor.Event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		var ready *supervisor.Event
		for i := range s.events {
			if s.events[i].Event == supervisor.EventReady {
				ready = &s.events[i]
			}
		}
		armed := strings.Contains(s.stdout.String(), "armed")
		ch := s.change
		s.mu.Unlock()
		if ready != nil && armed {
			return *ready, nil
		}
		if s.exited() {
			return supervisor.Event{}, s.failure("the stand-in controller ended before its agent was ready")
		}
		select {
		case <-ch:
		case <-t.C:
			return supervisor.Event{}, s.failure(fmt.Sprintf("no ready agent within %v", timeout))
		}
	}
}

// failure is an error that carries the stand-in's status and last line.
func (s *standin) failure(what string) error {
	s.kill()
	s.mu.Lock()
	defer s.mu.Unlock()
	last := ""
	for _, l := range strings.Split(strings.TrimSpace(s.stderr.String()), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			last = l
		}
	}
	code := shared.ExitSetupFailed
	if s.cmd.ProcessState != nil && s.cmd.ProcessState.ExitCode() > 0 {
		code = s.cmd.ProcessState.ExitCode()
	}
	if last != "" {
		what += ": " + last
	}
	return exitcode.With(code, errors.New(what))
}

func (s *standin) kill() {
	if s.cmd.Process != nil && !s.exited() {
		thaw(s.cmd.Process)
		s.cmd.Process.Kill()
	}
	<-s.done
}

// pull pulls the path's trigger on the stand-in and returns when it
// counts as pulled.
func (s *standin) pull(path string, ready supervisor.Event) time.Time {
	switch path {
	case PathHeartbeat:
		t := time.Now()
		freeze(s.cmd.Process)
		return t
	case PathDeadline:
		// The deadline runs from the agent's start; the ready event is
		// stamped just after it. Freeze the stand-in so that only the
		// watcher's own deadline can end the box.
		freeze(s.cmd.Process)
		return ready.Time
	}
	t := time.Now()
	s.cmd.Process.Kill()
	return t
}

// proveTrial runs one stand-in through one path and measures it.
func proveTrial(ctx context.Context, o *ProveOptions, path string) (*trialResult, error) {
	rt, err := supervisor.NewRuntime(o.Runtime, supervisor.RuntimeConfig{Log: o.Log, EngineEnv: o.EngineEnv})
	if err != nil {
		return nil, err
	}
	desc, _ := supervisor.Lookup(o.Runtime)
	counter, _ := rt.(ProcessCounter)
	marker := ""
	if desc.Has(supervisor.CapNoHostProcesses) {
		marker = launchid.Hex(16)
	}
	s, err := startStandin(o, path, marker)
	if err != nil {
		return nil, err
	}
	cleaned := false
	defer func() {
		s.kill()
		if !cleaned {
			// A trial that failed half-way leaves its box to reconcile,
			// as a restarted controller would.
			reconcile.Run(ctx, reconcile.Options{Instance: o.Instance, JournalDir: o.JournalDir, Runtimes: []string{o.Runtime}, EngineEnv: o.EngineEnv, Log: o.Log})
		}
	}()
	ready, err := s.waitArmed(60 * time.Second)
	if err != nil {
		return nil, err
	}
	var res *trialResult
	if desc.Has(supervisor.CapNoHostProcesses) {
		res, err = countedTrial(ctx, o, path, rt, counter, s, ready, marker)
	} else {
		res, err = seenTrial(ctx, o, path, rt, desc.Has(supervisor.CapAutoRemove), s, ready)
	}
	cleaned = err == nil // the trial ran reconcile itself
	return res, err
}

// seenTrial is a trial on a runtime whose box's processes the host sees:
// they are watched from the host until none is left, and the box's
// removal (by its engine, when autoRemove, else by reconcile once the
// stand-in is gone) is timed from the trigger.
func seenTrial(ctx context.Context, o *ProveOptions, path string, rt supervisor.Runtime, autoRemove bool, s *standin, ready supervisor.Event) (*trialResult, error) {
	procs, err := awaitBoxProcesses(ctx, rt, s, ready, path)
	if err != nil {
		return nil, err
	}
	res := &trialResult{procs: len(procs)}

	delay := startHostDelay()
	defer delay.Stop()
	trigger := s.pull(path, ready)
	deadBound, _ := o.deadBound(path)
	removedBound, _ := o.removedBound(path)

	// The box's removal is watched alongside (engines remove it
	// themselves once the watcher exits).
	var removedCh <-chan boxRemoval
	if autoRemove {
		removedCh = watchRemoval(ctx, rt, ready.Box, trigger.Add(removedBound+2*time.Second))
	}

	at, left := proc.WaitDead(procs, trigger.Add(deadBound+2*time.Second))
	res.dead = at.Sub(trigger)
	if len(left) > 0 {
		res.deadLeft = fmt.Sprintf("%d processes of the box still alive (%v)", len(left), left)
		for _, p := range left {
			killPID(p.PID)
		}
	}

	// The stand-in's remains: its journal entry (a runtime that removes
	// its boxes itself) or the whole box go through reconcile once the
	// stand-in is gone, as a restarted controller would do it.
	if autoRemove {
		r := <-removedCh
		res.removed = r.at.Sub(trigger)
		res.removedLeft = r.left
	}
	res.hostDelay = delay.Stop()
	s.kill()
	reconcileTrial(ctx, o, ready, trigger, autoRemove, res)
	return res, nil
}

// awaitBoxProcesses returns the box's processes the host sees: the
// watcher, the agent's main process and its two descendants. The agent
// said it forked them; /proc gets a moment to show them all.
func awaitBoxProcesses(ctx context.Context, rt supervisor.Runtime, s *standin, ready supervisor.Event, path string) ([]proc.Proc, error) {
	var procs []proc.Proc
	var err error
	for end := time.Now().Add(2 * time.Second); ; {
		if procs, err = boxProcesses(ctx, rt, ready); err != nil {
			// A box that was ready and has no PID 1 now has ended, though
			// the engine may list it a while longer (podman run's --rm).
			if path == PathDeadline && (errors.Is(err, errNoPID1) || boxEnded(ctx, rt, s, ready)) {
				s.kill()
				return nil, fmt.Errorf("%w (box %s: %w)", errUnseen, ready.Box, err)
			}
			return nil, s.failure(err.Error())
		}
		if len(procs) >= 4 || time.Now().After(end) {
			break
		}
		if s.exited() {
			if path == PathDeadline {
				return nil, fmt.Errorf("%w (box %s)", errUnseen, ready.Box)
			}
			return nil, s.failure(fmt.Sprintf("the box %s ended before the trigger", ready.Box))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(procs) < 4 {
		return nil, s.failure(fmt.Sprintf("saw only %d processes of box %s from the host (want the watcher, the agent and its 2 descendants); cannot prove anything", len(procs), ready.Box))
	}
	return procs, nil
}

// boxRemoval is when a box was seen gone, or what of it was left at the end.
type boxRemoval struct {
	at   time.Time
	left string
}

// watchRemoval polls the runtime until the box is gone or end passes.
func watchRemoval(ctx context.Context, rt supervisor.Runtime, box string, end time.Time) <-chan boxRemoval {
	ch := make(chan boxRemoval, 1)
	go func() {
		for time.Now().Before(end) {
			if there, err := rt.Exists(ctx, &supervisor.Box{Name: box}); err == nil && !there {
				ch <- boxRemoval{at: time.Now()}
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		ch <- boxRemoval{at: time.Now(), left: "box " + box}
	}()
	return ch
}

// reconcileTrial runs reconcile after a seen trial, as a restarted
// controller would, and records in res what it found left of the box
// and, without autoRemove, when the box was removed.
func reconcileTrial(ctx context.Context, o *ProveOptions, ready supervisor.Event, trigger time.Time, autoRemove bool, res *trialResult) {
	rep, rerr := reconcile.Run(ctx, reconcile.Options{Instance: o.Instance, JournalDir: o.JournalDir, Runtimes: []string{o.Runtime}, EngineEnv: o.EngineEnv, Log: o.Log})
	if !autoRemove {
		res.removed = time.Since(trigger)
	}
	if rerr != nil {
		res.removedLeft = joinNonEmpty(res.removedLeft, "reconcile: "+rerr.Error())
		return
	}
	for _, it := range rep.Blocked {
		if it.LaunchID == ready.LaunchID {
			res.removedLeft = joinNonEmpty(res.removedLeft, "reconcile blocked: "+it.Reason)
		}
	}
	if autoRemove {
		for _, it := range rep.Removed {
			if it.LaunchID == ready.LaunchID {
				res.removedLeft = joinNonEmpty(res.removedLeft, "the engine did not remove box "+it.Box+" (reconcile did)")
			}
		}
	}
}

// countedTrial is a trial on a runtime whose box's processes the host
// cannot see: the agent's processes (they carry the marker in their
// environment) are counted from inside the box until none is left, and
// the box is removed by reconcile once the stand-in is gone (or by the
// stand-in's supervisor itself, on the controller path). The dead time
// is an upper bound (countedDead).
func countedTrial(ctx context.Context, o *ProveOptions, path string, rt supervisor.Runtime, counter ProcessCounter, s *standin, ready supervisor.Event, marker string) (*trialResult, error) {
	box := &supervisor.Box{Name: ready.Box, LaunchID: ready.LaunchID}
	env := proveMarkerEnv + "=" + marker
	// The agent's main process and its two descendants.
	n := 0
	for end := time.Now().Add(10 * time.Second); n < 3; {
		var err error
		if n, err = counter.CountProcesses(ctx, box, env); err != nil {
			return nil, s.failure(fmt.Sprintf("count the processes of box %s: %v", ready.Box, err))
		}
		if n >= 3 {
			break
		}
		if time.Now().After(end) {
			return nil, s.failure(fmt.Sprintf("counted only %d agent processes in box %s (want the agent and its 2 descendants); cannot prove anything", n, ready.Box))
		}
		time.Sleep(50 * time.Millisecond)
	}
	res := &trialResult{procs: n}
	delay := startHostDelay()
	defer delay.Stop()
	trigger := s.pull(path, ready)
	deadBound, _ := o.deadBound(path)
	at, left := countedDead(ctx, rt, counter, box, env, trigger.Add(deadBound+2*time.Second))
	res.dead, res.deadLeft = at.Sub(trigger), left
	res.hostDelay = delay.Stop()
	s.kill()
	rep, rerr := reconcile.Run(ctx, reconcile.Options{Instance: o.Instance, JournalDir: o.JournalDir, Runtimes: []string{o.Runtime}, EngineEnv: o.EngineEnv, Log: o.Log})
	res.removed = time.Since(trigger)
	if rerr != nil {
		res.removedLeft = "reconcile: " + rerr.Error()
	} else {
		for _, it := range rep.Blocked {
			if it.LaunchID == ready.LaunchID {
				res.removedLeft = joinNonEmpty(res.removedLeft, "reconcile blocked: "+it.Reason)
			}
		}
	}
	if there, err := rt.Exists(ctx, box); err != nil || there {
		res.removedLeft = joinNonEmpty(res.removedLeft, fmt.Sprintf("box %s still there after reconcile (%v)", ready.Box, err))
	}
	return res, nil
}

// boxLister is the part of a runtime countedDead asks.
type boxLister interface {
	Exists(ctx context.Context, b *supervisor.Box) (bool, error)
}

// countedDead counts the box's processes that carry env until none is
// left, and returns when that was first seen; past end it returns what
// was still counted. A box the runtime no longer lists has none left:
// its processes end with it. On the controller path the supervisor
// removes its box itself, and a count cannot run in a box being
// removed, so the box's absence is often the first sight of the
// agent's death. Either sight comes after the death: the time is an
// upper bound.
func countedDead(ctx context.Context, rt boxLister, counter ProcessCounter, box *supervisor.Box, env string, end time.Time) (time.Time, string) {
	for {
		n, err := counter.CountProcesses(ctx, box, env)
		if err == nil && n == 0 {
			return time.Now(), ""
		}
		if err != nil {
			if there, lerr := rt.Exists(ctx, box); lerr == nil && !there {
				return time.Now(), ""
			}
		}
		if time.Now().After(end) {
			return time.Now(), fmt.Sprintf("%d agent processes still counted in box %s (last error: %v)", n, box.Name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func joinNonEmpty(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// boxEnded says whether the stand-in's box is over: the stand-in
// exited, or the runtime no longer lists the box.
func boxEnded(ctx context.Context, rt supervisor.Runtime, s *standin, ready supervisor.Event) bool {
	if s.exited() {
		return true
	}
	there, err := rt.Exists(ctx, &supervisor.Box{Name: ready.Box, LaunchID: ready.LaunchID})
	return err == nil && !there
}

// boxProcesses lists the box's processes as the host sees them: its
// PID 1 (the runtime's HostPID), everything below it, and everything
// else in its PID namespace where /proc lets us see that.
func boxProcesses(ctx context.Context, rt supervisor.Runtime, ready supervisor.Event) ([]proc.Proc, error) {
	pid, err := rt.HostPID(ctx, &supervisor.Box{Name: ready.Box, LaunchID: ready.LaunchID})
	if err != nil {
		return nil, err
	}
	if pid <= 0 {
		return nil, fmt.Errorf("the box %s has %w", ready.Box, errNoPID1)
	}
	return proc.Tree(pid), nil
}

// WriteProveTable prints the report as a table.
func WriteProveTable(w io.Writer, rep *ProveReport) {
	fmt.Fprintf(w, "prove-deathwatch: runtime %s", rep.Runtime)
	if rep.Image != "" {
		fmt.Fprintf(w, ", image %s", rep.Image)
	}
	fmt.Fprintf(w, ", %d trials per path\n", rep.Trials)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tMEASURE\tBOUND\tP50\tP95\tMAX\tN\tHOST-DELAY\tRESULT")
	loaded := 0
	for _, r := range rep.Rows {
		res := "pass"
		switch {
		case !r.Pass:
			res = "FAIL"
		case len(r.Loaded) > 0:
			res = "pass (busy/slow host)"
		}
		loaded += len(r.Loaded)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Path, r.Measure, r.BoundStr, fmtDur(r.P50), fmtDur(r.P95), fmtDur(r.Max), r.N, fmtDur(r.HostDelay), res)
	}
	tw.Flush()
	for _, r := range rep.Rows {
		for _, f := range r.Failures {
			fmt.Fprintf(w, "  %s %s: %s\n", r.Path, r.Measure, f)
		}
		for _, l := range r.Loaded {
			fmt.Fprintf(w, "  %s %s: %s\n", r.Path, r.Measure, l)
		}
	}
	if rep.CPU != nil {
		fmt.Fprintf(w, "cpu: %s\n", rep.CPU.Statement())
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if rep.Error != "" {
		fmt.Fprintf(w, "could not run: %s\n", rep.Error)
	}
	verdict := "pass: every box died and was removed within its bound"
	switch {
	case !rep.Pass:
		verdict = "FAIL"
	case loaded > 0:
		verdict = fmt.Sprintf("pass on a busy or slow host: every box died and was removed; %d trials passed their bound only by the host's own wake-up delay (HOST-DELAY) or its slow CPU (cpu); --strict refuses that", loaded)
	}
	fmt.Fprintf(w, "verdict: %s\n", verdict)
	if rep.Defaults != "" {
		fmt.Fprintf(w, "with exec's defaults: %s\n", rep.Defaults)
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}
