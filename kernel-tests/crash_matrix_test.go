package kerneltests

// The crash-window matrix: for Docker, rootful Podman, rootless Podman
// and native, SIGKILL the supervisor at every lifecycle point (local
// Podman's one `podman run` adds in-run: the run client is creating the
// box while the journal still says intent), run
// `supervisor reconcile`, and check that nothing of the launch is left
// (no box, no agent process, no open journal entry) while every decoy
// is untouched: this instance's label with a wrong nonce, this
// instance's label with no journal entry, another instance's box, an
// unlabelled box, and a box whose owner is alive.
//
// The supervisor stops itself at a point when DEATHWATCH_TEST_PAUSE_AT
// names it (supervisor/crashpoint.go); the test waits for the stopped
// state and kills it there. "running" needs no crash point: the test
// kills it once the agent said it is armed.

import (
	"bufio"
	"bytes"
	"context"
	"deathwatch/supervisor/journal"
	"encoding/json"
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

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/reconcile"
	"deathwatch/supervisor/runtime/native"
	"deathwatch/supervisor/supervisortest"
)

// cwPoints are the kill points, in lifecycle order.
var cwPoints = []string{
	supervisortest.CrashAfterJournal, // after the journal intent, before create
	supervisortest.CrashInRun,        // one-step rigs: the run client creates the box, the journal says intent
	supervisortest.CrashAfterCreate,  // after create, before start (one-step: the run client starts it)
	supervisortest.CrashAfterStart,   // after start, before ready
	"running",                        // the agent runs
	supervisortest.CrashRemoving,     // during removal (intent journaled)
}

// points are the kill points of r's lifecycle: in-run only where one
// engine client creates and starts the box.
func (r *rig) points() []string {
	var ps []string
	for _, p := range cwPoints {
		if p != supervisortest.CrashInRun || r.oneStep() {
			ps = append(ps, p)
		}
	}
	return ps
}

// oneStep reports whether the supervisor drives r with one `podman
// run` per launch (supervisor.OneStepStarter): local podman without a
// service socket, as the runtime decides.
func (r *rig) oneStep() bool {
	if r.Runtime != "podman" {
		return false
	}
	sock := "/run/podman/podman.sock"
	if r.User != "" {
		rd, err := ktest.RuntimeDir(r.User)
		if err != nil {
			r.T.Fatal(err)
		}
		sock = filepath.Join(rd, "podman", "podman.sock")
	}
	_, err := os.Stat(sock)
	return err != nil
}

// cwAgent forks a setsid'd and a TERM-ignoring descendant, says it is
// armed, and sleeps; $0 carries a marker so the test can find it.
const cwAgent = `setsid sleep 600 & (trap '' TERM; exec sleep 600) & echo armed; exec sleep 600`

// rig is one runtime as the supervisor's kernel tests drive it (the
// engine tests, the crash windows, doctor, prove-deathwatch), with a
// second instance of the same runtime for decoys.
type rig struct {
	ktest.Rig
	other string // another instance, for decoys
}

// rigs makes the rigs named (every one when none).
func rigs(t *testing.T, names ...string) []*rig {
	var out []*rig
	for _, p := range ktest.Rigs(t, names...) {
		out = append(out, &rig{Rig: p})
	}
	return out
}

// setup gives the rig its instances and fails the test that leaves a
// box of either behind (a record, a cgroup, a container), after its own
// clean-ups ran and the engine had time to finish a removal under way
// (--rm): a box left is one that reconcile, run by the test or not, did
// not remove.
func (r *rig) setup(t *testing.T) {
	r.Setup(t, "cw")
	r.other = r.Instance + "-other"
	t.Cleanup(func() {
		var left []string
		gone := func() bool { left = append(r.boxes(r.Instance), r.boxes(r.other)...); return len(left) == 0 }
		if !ktest.WaitFor(2*ktest.Slack, gone) {
			t.Errorf("the test left boxes %v of instances %s and %s", left, r.Instance, r.other)
		}
	})
}

// exec is `supervisor exec` for instance with an events file.
func (r *rig) exec(env []string, instance, events string, args ...string) *exec.Cmd {
	return r.Command(env, r.Bin.Supervisor, r.ExecArgs(instance, append([]string{"--events", events}, args...)...)...)
}

// reconcile runs `supervisor reconcile --json` for instance.
func (r *rig) reconcile(instance string) (int, reconcile.Report, string) {
	r.T.Helper()
	return supervisorJSON[reconcile.Report](r, "--instance", instance, "--journal", r.JournalDir(), "reconcile", "--json")
}

// supervisorJSON runs the supervisor as the rig's user with a --json
// command and returns its exit status, its decoded report and stderr.
func supervisorJSON[T any](r *rig, argv ...string) (int, T, string) {
	r.T.Helper()
	cmd := r.Command(nil, r.Bin.Supervisor, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		r.T.Fatalf("supervisor %s: %v", strings.Join(argv, " "), err)
	}
	var rep T
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		r.T.Fatalf("supervisor %s (exit %d): %v\nstdout: %s\nstderr: %s", strings.Join(argv, " "), code, jerr, stdout.String(), stderr.String())
	}
	if name := outputSchema(argv); name != "" {
		ktest.CheckOutput(r.T, name, stdout.Bytes())
	}
	return code, rep, stderr.String()
}

// outputSchema is the schema of the --json output of the command argv
// runs, "" when it has none.
func outputSchema(argv []string) string {
	for _, a := range argv {
		switch a {
		case "ls":
			return ktest.SchemaLs
		case "reconcile":
			return ktest.SchemaReconcile
		case "doctor":
			return ktest.SchemaDoctor
		case "prove-deathwatch":
			return ktest.SchemaProve
		}
	}
	return ""
}

// boxes lists the boxes that carry instance's label (native: records).
func (r *rig) boxes(instance string) []string {
	r.T.Helper()
	if r.Runtime == "native" {
		if r.User == "" {
			ls, err := native.New(nil, native.Options{StateDir: r.NativeState}).List(context.Background(), instance)
			if err != nil {
				r.T.Fatalf("native list: %v", err)
			}
			var out []string
			for _, b := range ls {
				out = append(out, b.Name)
			}
			return out
		}
		// The user's records, read as files: the runtime trusts only its
		// own user's folder, and the test runs as root.
		files, _ := filepath.Glob(filepath.Join(r.NativeState, "*.json"))
		var out []string
		for _, f := range files {
			var rec struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			}
			if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &rec) == nil && rec.Labels[shared.LabelInstance] == instance {
				out = append(out, rec.Name)
			}
		}
		return out
	}
	out, err := r.Engine("ps", "--all", "--filter", "label="+shared.LabelInstance+"="+instance, "--format", "{{.Names}}").Output()
	if err != nil {
		r.T.Fatalf("%s ps: %v", r.Name, err)
	}
	return strings.Fields(string(out))
}

// exists reports whether box is there: the engine knows it, or (native)
// its record or any of its cgroup folders is left.
func (r *rig) exists(box string) bool {
	if r.Runtime == "native" {
		if _, err := os.Stat(filepath.Join(r.NativeState, box+".json")); err == nil {
			return true
		}
		return len(cwCgroupDirs(box)) > 0
	}
	return r.Engine("container", "inspect", "--format", "{{.Id}}", box).Run() == nil
}

func cwCgroupDirs(box string) []string {
	a, _ := filepath.Glob("/sys/fs/cgroup/*/deathwatch/" + box)
	b, _ := filepath.Glob("/sys/fs/cgroup/deathwatch/" + box)
	return append(a, b...)
}

func (r *rig) entries(instance string) []*journal.Entry {
	r.T.Helper()
	if r.User != "" {
		// The user's journal, read as files: the supervisor trusts only
		// its own user's folders, and the test runs as root.
		files, _ := filepath.Glob(filepath.Join(r.JournalDir(), instance, "*.json"))
		closed, _ := filepath.Glob(filepath.Join(r.JournalDir(), instance, "closed", "*.json"))
		files = append(files, closed...)
		var es []*journal.Entry
		for _, f := range files {
			var e journal.Entry
			b, err := os.ReadFile(f)
			if err == nil {
				err = json.Unmarshal(b, &e)
			}
			if err != nil {
				r.T.Fatalf("journal entry %s: %v", f, err)
			}
			es = append(es, &e)
		}
		return es
	}
	j, err := journal.Open(r.JournalDir(), instance, nil)
	if err != nil {
		r.T.Fatal(err)
	}
	es, bad, err := j.List()
	if err != nil || len(bad) != 0 {
		r.T.Fatalf("journal: %v %v", err, bad)
	}
	return es
}

// boxProcs is every process of a running box as the host sees it: its
// PID 1 (docker/podman: State.Pid; native: the journaled init pid),
// everything below it, and everything in its PID namespace.
func (r *rig) boxProcs(box string, entry *journal.Entry) []ktest.Proc {
	pid := 0
	if r.Runtime == "native" {
		if entry != nil {
			pid, _ = strconv.Atoi(entry.RuntimeState[native.StateInitPID])
		}
	} else if out, err := r.Engine("container", "inspect", "--format", "{{.State.Pid}}", box).Output(); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	}
	if pid <= 0 {
		return nil
	}
	st, err := ktest.ReadStat(pid)
	if err != nil {
		return nil
	}
	ps := append([]ktest.Proc{{PID: pid, Start: st.Start}}, ktest.Descendants(pid)...)
	if ns, err := ktest.PIDNamespace(pid); err == nil {
		own, _ := ktest.PIDNamespace(os.Getpid())
		if ns != own {
			seen := map[int]bool{}
			for _, p := range ps {
				seen[p.PID] = true
			}
			for _, p := range ktest.InNamespace(ns) {
				if !seen[p.PID] {
					ps = append(ps, p)
				}
			}
		}
	}
	return ps
}

// cwRun is one supervisor exec the test drives.
type cwRun struct {
	cmd    *exec.Cmd
	events string
	mu     sync.Mutex
	out    bytes.Buffer
	done   chan struct{}
}

func (c *cwRun) stdout() string { c.mu.Lock(); defer c.mu.Unlock(); return c.out.String() }

type cwLocked struct{ c *cwRun }

func (w cwLocked) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.out.Write(p)
}

func (r *rig) start(instance string, env []string, args ...string) *cwRun {
	r.T.Helper()
	ev := filepath.Join(r.Dir, fmt.Sprintf("events-%d.jsonl", time.Now().UnixNano()))
	f, err := os.OpenFile(ev, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		r.T.Fatal(err)
	}
	f.Close()
	if r.User != "" {
		os.Chown(ev, r.UID, r.GID)
	}
	c := &cwRun{events: ev, done: make(chan struct{})}
	c.cmd = r.exec(env, instance, ev, args...)
	c.cmd.Stdout, c.cmd.Stderr = cwLocked{c}, cwLocked{c}
	if err := c.cmd.Start(); err != nil {
		r.T.Fatalf("start supervisor exec: %v", err)
	}
	go func() { c.cmd.Wait(); close(c.done) }()
	return c
}

func (c *cwRun) event(name string) *supervisor.Event {
	b, _ := os.ReadFile(c.events)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var ev supervisor.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Event == name {
			return &ev
		}
	}
	return nil
}

// waitFor polls cond every 2ms until it holds, the run ends, or timeout.
func (c *cwRun) waitFor(timeout time.Duration, cond func() bool) bool {
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		select {
		case <-c.done:
			return cond()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return false
}

func (c *cwRun) stopped() bool { return ktest.Stopped(c.cmd.Process.Pid) }

func (c *cwRun) kill() {
	c.cmd.Process.Kill()
	<-c.done
}

// cwDecoys are the boxes reconcile must never touch.
type cwDecoys struct {
	nonce, noEntry, other, plain string // boxes (plain: engines only)
	alive                        *cwRun
	aliveBox                     string
	aliveLaunch, nonceLaunch     string
}

// putEntry writes a journal entry as the rig's user would own it.
func (r *rig) putEntry(instance string, e *journal.Entry) {
	r.T.Helper()
	if r.User != "" {
		// Written as files and handed to the user: the supervisor opens
		// only its own user's journal, and the test runs as root.
		dir := filepath.Join(r.JournalDir(), instance)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			r.T.Fatal(err)
		}
		e.Updated = time.Now().UTC()
		b, _ := json.MarshalIndent(e, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, e.LaunchID+".json"), b, 0o600); err != nil {
			r.T.Fatal(err)
		}
		filepath.Walk(r.JournalDir(), func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, r.UID, r.GID) })
		return
	}
	j, err := journal.Open(r.JournalDir(), instance, nil)
	if err != nil {
		r.T.Fatal(err)
	}
	if err := j.Put(e); err != nil {
		r.T.Fatal(err)
	}
}

// makeBox creates a box with labels (engines: `create`, never started;
// native: a record like the runtime's own, no processes).
func (r *rig) makeBox(name string, labels map[string]string) {
	r.T.Helper()
	if r.Runtime == "native" {
		rec, _ := json.Marshal(map[string]any{"name": name, "labels": labels, "state": map[string]string{}})
		if err := os.MkdirAll(r.NativeState, 0o700); err != nil {
			r.T.Fatal(err)
		}
		p := filepath.Join(r.NativeState, name+".json")
		if err := os.WriteFile(p, rec, 0o600); err != nil {
			r.T.Fatal(err)
		}
		if r.User != "" {
			for _, q := range []string{filepath.Dir(filepath.Dir(r.NativeState)), filepath.Dir(r.NativeState), r.NativeState, p} {
				if err := os.Chown(q, r.UID, r.GID); err != nil {
					r.T.Fatal(err)
				}
			}
		}
		return
	}
	args := []string{"create", "--name", name, "--network", "none"}
	for k, v := range labels {
		args = append(args, "--label", k+"="+v)
	}
	args = append(args, "--entrypoint", "/bin/sleep", r.Image, "600")
	if out, err := r.Engine(args...).CombinedOutput(); err != nil {
		r.T.Fatalf("create decoy %s: %v\n%s", name, err, out)
	}
}

func (r *rig) dropBox(name string) {
	if r.Runtime == "native" {
		os.Remove(filepath.Join(r.NativeState, name+".json"))
		return
	}
	args := []string{"rm", "-f", name}
	if r.Runtime == "podman" {
		args = []string{"rm", "-f", "-t", "0", name}
	}
	r.Engine(args...).Run()
}

func cwLabels(instance, launch, nonce string) map[string]string {
	return map[string]string{shared.LabelManaged: "true", shared.LabelInstance: instance, shared.LabelLaunchID: launch, shared.LabelNonce: nonce}
}

func (r *rig) decoys() *cwDecoys {
	t := r.T
	d := &cwDecoys{}
	tag := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	now := time.Now().UTC()

	// This instance's label, a journal entry with a dead owner, but the
	// box's nonce is not the journaled one.
	d.nonceLaunch = "decoy-nonce-" + tag
	d.nonce = "dwdecoy-nonce-" + tag
	r.putEntry(r.Instance, &journal.Entry{LaunchID: d.nonceLaunch, Instance: r.Instance, Box: d.nonce,
		Runtime: r.Runtime, Nonce: "the-journaled-nonce", Labels: cwLabels(r.Instance, d.nonceLaunch, "the-journaled-nonce"),
		Owner: supervisortest.DeadOwner(t), State: journal.StateStarted, Created: now})
	r.makeBox(d.nonce, cwLabels(r.Instance, d.nonceLaunch, "another-nonce"))

	// This instance's label, no journal entry at all.
	d.noEntry = "dwdecoy-noentry-" + tag
	r.makeBox(d.noEntry, cwLabels(r.Instance, "decoy-noentry-"+tag, "some-nonce"))

	// Another instance's box, with a journal entry of its own and a dead
	// owner: reconcile of that instance would remove it, ours must not.
	otherLaunch := "decoy-other-" + tag
	d.other = "dwdecoy-other-" + tag
	r.putEntry(r.other, &journal.Entry{LaunchID: otherLaunch, Instance: r.other, Box: d.other,
		Runtime: r.Runtime, Nonce: "n-other", Labels: cwLabels(r.other, otherLaunch, "n-other"),
		Owner: supervisortest.DeadOwner(t), State: journal.StateStarted, Created: now})
	r.makeBox(d.other, cwLabels(r.other, otherLaunch, "n-other"))

	// An unlabelled box (engines only: a native box is its record).
	if r.Runtime != "native" {
		d.plain = "dwdecoy-plain-" + tag
		r.makeBox(d.plain, map[string]string{})
	}

	// A real box of this instance whose supervisor is alive.
	d.alive = r.start(r.Instance, nil, "--", "sleep", "600")
	if !d.alive.waitFor(60*time.Second, func() bool { return d.alive.event(supervisor.EventReady) != nil }) {
		t.Fatalf("the live-owner decoy never became ready:\n%s", d.alive.stdout())
	}
	ev := d.alive.event(supervisor.EventReady)
	d.aliveBox, d.aliveLaunch = ev.Box, ev.LaunchID

	t.Cleanup(func() {
		if d.alive != nil {
			select {
			case <-d.alive.done:
			default:
				d.alive.kill()
			}
			r.dropBox(d.aliveBox)
		}
		for _, b := range []string{d.nonce, d.noEntry, d.other, d.plain} {
			if b != "" {
				r.dropBox(b)
			}
		}
	})
	return d
}

// check fails the test when a decoy was touched.
func (r *rig) checkDecoys(d *cwDecoys, after string) {
	r.T.Helper()
	for _, b := range []string{d.nonce, d.noEntry, d.other, d.plain, d.aliveBox} {
		if b != "" && !r.exists(b) {
			r.T.Errorf("%s: decoy box %s was removed", after, b)
		}
	}
	select {
	case <-d.alive.done:
		r.T.Errorf("%s: the live-owner decoy's supervisor ended:\n%s", after, d.alive.stdout())
	default:
	}
	if !strings.Contains(strings.Join(r.boxes(r.other), " "), d.other) {
		r.T.Errorf("%s: another instance's box %s is no longer listed", after, d.other)
	}
}

// cwReps is how often each cell runs.
const cwReps = 3

// cwCell is one cell of the matrix.
type cwCell struct {
	outcome string // removed | closed | blocked | leaked (and why)
	procs   int    // agent processes at the kill
}

func TestCrashWindowMatrix(t *testing.T) {
	rigs := rigs(t)
	matrix := map[string]map[string]cwCell{}
	var mu sync.Mutex
	t0 := time.Now()
	for _, proto := range rigs {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)
			d := r.decoys()
			row := map[string]cwCell{}
			mu.Lock()
			matrix[r.Name] = row
			mu.Unlock()
			for _, point := range r.points() {
				var cell cwCell
				counts := map[string]int{}
				var order []string
				for i := 0; i < cwReps; i++ {
					c := r.crashAt(point, d)
					if counts[c.outcome] == 0 {
						order = append(order, c.outcome)
					}
					counts[c.outcome]++
					if c.procs > cell.procs {
						cell.procs = c.procs
					}
				}
				var parts []string
				for _, o := range order {
					parts = append(parts, fmt.Sprintf("%s×%d", o, counts[o]))
				}
				cell.outcome = strings.Join(parts, " ")
				mu.Lock()
				row[point] = cell
				mu.Unlock()
			}
			// The live-owner decoy still runs; end it the ordinary way.
			d.alive.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.alive.done:
			case <-time.After(30 * time.Second):
				t.Errorf("the live-owner decoy did not end on SIGTERM")
			}
			if r.exists(d.aliveBox) {
				t.Errorf("the live-owner decoy's box %s is still there after its supervisor ended", d.aliveBox)
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "crash-window matrix (runtime × kill point → what reconcile did to the launch, %d runs per cell; most box processes seen at the kill), %v:\n", cwReps, time.Since(t0).Round(time.Second))
	fmt.Fprintf(&b, "%-20s", "")
	for _, p := range cwPoints {
		fmt.Fprintf(&b, " %-30s", p)
	}
	b.WriteString("\n")
	for _, r := range rigs {
		fmt.Fprintf(&b, "%-20s", r.Name)
		for _, p := range cwPoints {
			c, ok := matrix[r.Name][p]
			s := "not run"
			if !slices.Contains(r.points(), p) {
				s = "— (no such point)"
			}
			if ok {
				s = fmt.Sprintf("%s (%d procs)", c.outcome, c.procs)
			}
			fmt.Fprintf(&b, " %-30s", s)
		}
		b.WriteString("\n")
	}
	b.WriteString("leaked: none unless a cell says LEAKED; decoys (wrong nonce, no journal entry, other instance, unlabelled, live owner) blocked and untouched unless an error above says otherwise\n")
	t.Log(b.String())
}

// crashAt kills one supervisor at point, reconciles, and checks.
func (r *rig) crashAt(point string, d *cwDecoys) cwCell {
	t := r.T
	var env []string
	args := []string{"--", "sh", "-c", cwAgent}
	if point != "running" {
		env = []string{supervisortest.CrashPointEnv + "=" + point}
	}
	if point == supervisortest.CrashRemoving {
		args = []string{"--", "sh", "-c", "echo armed"}
	}
	run := r.start(r.Instance, env, args...)
	reached := false
	if point == "running" {
		reached = run.waitFor(60*time.Second, func() bool { return strings.Contains(run.stdout(), "armed") })
	} else {
		reached = run.waitFor(60*time.Second, run.stopped)
	}
	if !reached {
		run.kill()
		t.Fatalf("%s: the supervisor never reached %s:\n%s", r.Name, point, run.stdout())
	}
	ev := run.event(supervisor.EventJournaled)
	if ev == nil {
		run.kill()
		t.Fatalf("%s/%s: no journaled event", r.Name, point)
	}
	box, launch := ev.Box, ev.LaunchID
	if b, err := os.ReadFile(run.events); err == nil {
		ktest.CheckEvents(t, b)
	}
	var entry *journal.Entry
	for _, e := range r.entries(r.Instance) {
		if e.LaunchID == launch {
			entry = e
		}
	}
	// The supervisor stopped exactly at the point: the journal says so,
	// and no agent runs before ready.
	wantState := map[string]string{supervisortest.CrashAfterJournal: journal.StateIntent, supervisortest.CrashInRun: journal.StateIntent, supervisortest.CrashAfterCreate: journal.StateCreated,
		supervisortest.CrashAfterStart: journal.StateStarted, "running": journal.StateStarted, supervisortest.CrashRemoving: journal.StateRemoving}[point]
	if entry == nil || entry.State != wantState {
		t.Errorf("%s/%s: journal entry at the kill %+v, want state %s", r.Name, point, entry, wantState)
	}
	procs := r.boxProcs(box, entry)
	if point != "running" && len(procs) > 1 {
		t.Errorf("%s/%s: %d box processes before ready (want at most the watcher): %s", r.Name, point, len(procs), ktest.Describe(procs))
	}
	// The supervisor's own children (the engine client, the native
	// init) must not outlive it either.
	children := ktest.Descendants(run.cmd.Process.Pid)
	if point == "running" && len(procs) < 4 {
		t.Errorf("%s/%s: only %d box processes seen before the kill: %s", r.Name, point, len(procs), ktest.Describe(procs))
	}
	run.kill()

	code, rep, stderr := r.reconcile(r.Instance)
	cell := cwCell{procs: len(procs), outcome: "unreported"}
	find := func(items []reconcile.Item) *reconcile.Item {
		for i := range items {
			if items[i].LaunchID == launch {
				return &items[i]
			}
		}
		return nil
	}
	reason := ""
	switch {
	case find(rep.Removed) != nil:
		cell.outcome = "removed"
		reason = find(rep.Removed).Reason
	case find(rep.Closed) != nil:
		cell.outcome = "closed"
		reason = find(rep.Closed).Reason
	case find(rep.Blocked) != nil:
		cell.outcome = "blocked"
		t.Errorf("%s/%s: reconcile blocked our own launch: %s", r.Name, point, find(rep.Blocked).Reason)
	default:
		t.Errorf("%s/%s: reconcile did not report launch %s: %+v", r.Name, point, launch, rep)
	}
	// The decoys are blocked, so the status is BLOCKED: exactly them.
	if code != shared.ExitBlocked {
		t.Errorf("%s/%s: reconcile exit %d, want %d (decoys are blocked)\n%s", r.Name, point, code, shared.ExitBlocked, stderr)
	}
	blocked := map[string]string{}
	for _, it := range rep.Blocked {
		blocked[it.Box] = it.Reason
	}
	for _, b := range []string{d.nonce, d.noEntry, d.aliveBox} {
		if _, ok := blocked[b]; !ok {
			t.Errorf("%s/%s: decoy %s not reported blocked: %+v", r.Name, point, b, rep.Blocked)
		}
	}
	if len(rep.Blocked) != 3 {
		t.Errorf("%s/%s: %d blocked, want the 3 decoys of this instance: %+v", r.Name, point, len(rep.Blocked), rep.Blocked)
	}

	// Nothing of the launch is left.
	var leaks []string
	if _, left := ktest.WaitDead(procs, time.Now(), 5*time.Second); len(left) > 0 {
		leaks = append(leaks, "processes "+ktest.Describe(left))
	}
	if _, left := ktest.WaitDead(children, time.Now(), 10*time.Second); len(left) > 0 {
		leaks = append(leaks, "the supervisor's children "+ktest.Describe(left))
	}
	if r.exists(box) {
		leaks = append(leaks, "box "+box)
	}
	if _, err := os.Lstat(filepath.Join(r.liveRoot(), box)); err == nil {
		leaks = append(leaks, "live FIFO folder "+filepath.Join(r.liveRoot(), box))
	}
	for _, e := range r.entries(r.Instance) {
		if e.Open() && e.LaunchID != d.aliveLaunch && e.LaunchID != d.nonceLaunch {
			leaks = append(leaks, fmt.Sprintf("open journal entry %s (%s)", e.LaunchID, e.State))
		}
	}
	for _, b := range r.boxes(r.Instance) {
		if b != d.nonce && b != d.noEntry && b != d.aliveBox {
			leaks = append(leaks, "listed box "+b)
		}
	}
	if len(leaks) > 0 {
		cell.outcome = "LEAKED"
		t.Errorf("%s/%s: left behind after reconcile: %s", r.Name, point, strings.Join(leaks, "; "))
		r.dropBox(box)
	}
	r.checkDecoys(d, r.Name+"/"+point)

	// Idempotent: a second run changes nothing.
	code2, rep2, _ := r.reconcile(r.Instance)
	if code2 != code || len(rep2.Removed) != 0 || len(rep2.Closed) != 0 || len(rep2.Blocked) != len(rep.Blocked) {
		t.Errorf("%s/%s: a second reconcile changed something: exit %d, %+v", r.Name, point, code2, rep2)
	}
	t.Logf("%s/%s: %d box processes and %d supervisor children at the kill; reconcile: %s (%s)", r.Name, point, len(procs), len(children), cell.outcome, reason)
	return cell
}
