package kerneltests

import (
	"bufio"
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
	"deathwatch/supervisor/reconcile"
	"deathwatch/supervisor/supervisortest"
)

// The controller chain (controller → supervisor → watcher): a real
// controller process, in Go (ktest/chainctl, os/exec) or Python 3
// (subprocess), starts `supervisor exec` children and is SIGKILLed;
// nothing of its supervisors and boxes may run on.

// chainPython is the Python controller: chainctl's main and thread
// modes with subprocess.Popen.
const chainPython = `import subprocess, sys, threading, time
mode, n, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
procs = []
def start():
    procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE))
for _ in range(n):
    if mode == "thread":
        t = threading.Thread(target=start)
        t.start()
        t.join()  # the thread that forked the supervisor is gone
    else:
        start()
for p in procs:
    print("started", p.pid, flush=True)
for p in procs:
    while True:
        line = p.stdout.readline()
        if not line:
            sys.exit("supervisor %d ended before ready" % p.pid)
        if line.strip() == b"ready":
            break
print("ready", flush=True)
while True:
    time.sleep(3600)
`

// chainCeiling bounds each wait of these tests: box starts and deaths on
// a host at load 8.
const chainCeiling = 90 * time.Second

// chainAgent says ready, then runs with marker as its $0 (and in its
// supervisor's argv); with ticks it prints a line every 100 ms.
func chainAgent(marker string, ticks bool) []string {
	script := "echo ready; while :; do sleep 1; done"
	if ticks {
		script = "echo ready; while :; do echo tick; sleep 0.1; done"
	}
	return []string{"--", "/bin/sh", "-c", script, marker}
}

// chain is a running controller.
type chain struct {
	t       *testing.T
	cmd     *exec.Cmd
	lines   chan string
	started []int
	marker  string
	stderr  string // the file with its (and its children's) stderr
}

// startChain starts a controller (lang go or python) in mode with n
// supervisors of the rig running supArgs (after ExecArgs), as the rig's
// user, and returns it (the test reads its lines with until).
func startChain(t *testing.T, r *rig, lang, mode string, n int, env []string, marker string, supArgs ...string) *chain {
	t.Helper()
	sup := append([]string{r.Bin.Supervisor}, r.ExecArgs(r.Instance, supArgs...)...)
	command := func(name string, args ...string) *exec.Cmd { return r.Command(env, name, args...) }
	return runChain(t, chainController(t, lang, mode, n, r.Dir, command, sup), marker, r.Dir, func() { r.reconcile(r.Instance) })
}

// chainController is the controller in lang (go: chainctl; python:
// chainPython, written into dir) in mode, starting n copies of the
// supervisor argv sup; command makes its process (as whom, with what
// environment).
func chainController(t *testing.T, lang, mode string, n int, dir string, command func(name string, args ...string) *exec.Cmd, sup []string) *exec.Cmd {
	t.Helper()
	switch lang {
	case "go":
		return command(ktest.ToolPath(t, "chainctl"), append([]string{"-n", strconv.Itoa(n), "-mode", mode, "--"}, sup...)...)
	case "python":
		// The system's python3: one in root's home is not the rig user's.
		py := "/usr/bin/python3"
		if _, err := os.Stat(py); err != nil {
			t.Fatalf("python3 is needed to play a Python controller: %v", err)
		}
		script := filepath.Join(dir, "controller.py")
		if err := os.WriteFile(script, []byte(chainPython), 0o644); err != nil {
			t.Fatal(err)
		}
		return command(py, append([]string{script, mode, strconv.Itoa(n)}, sup...)...)
	}
	t.Fatalf("no controller in %q (want go or python)", lang)
	return nil
}

// runChain starts the controller cmd with its (and its children's)
// stderr in a file of dir and its stdout read line by line. The test's
// cleanup kills it; when the test failed, also what carries marker, and
// then calls reconcile.
func runChain(t *testing.T, cmd *exec.Cmd, marker, dir string, reconcile func()) *chain {
	t.Helper()
	c := &chain{t: t, cmd: cmd, marker: marker, lines: make(chan string, 64), stderr: filepath.Join(dir, fmt.Sprintf("controller-%d.err", time.Now().UnixNano()))}
	errf, err := os.Create(c.stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	os.Chmod(c.stderr, 0o666)
	cmd.Stderr = errf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			// What a failed test left: its supervisors, then reconcile.
			for _, p := range ktest.WithMarker(marker) {
				syscall.Kill(p.PID, syscall.SIGKILL)
			}
			time.Sleep(time.Second)
			reconcile()
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	return c
}

// until reads the controller's lines until one starts with prefix, and
// returns it.
func (c *chain) until(prefix string) string {
	c.t.Helper()
	timeout := time.After(chainCeiling)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				b, _ := os.ReadFile(c.stderr)
				c.t.Fatalf("the controller ended before %q; its stderr:\n%s", prefix, b)
			}
			if pid, ok := strings.CutPrefix(l, "started "); ok {
				n, _ := strconv.Atoi(pid)
				c.started = append(c.started, n)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			b, _ := os.ReadFile(c.stderr)
			c.t.Fatalf("no %q from the controller within %v; its stderr:\n%s", prefix, chainCeiling, b)
		}
	}
}

// kill SIGKILLs the controller and reaps it; it returns when.
func (c *chain) kill() time.Time {
	c.t.Helper()
	at := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	c.cmd.Wait()
	return at
}

// procs are the processes of the controller's supervisors and boxes:
// those with its marker in their argv (the supervisors, engine clients,
// the agents, whose $0 it is), but the controller and the agents'
// passing forks; at least want of them.
func (c *chain) procs(want int) []ktest.Proc {
	c.t.Helper()
	ps := c.marked()
	if len(ps) < want {
		c.t.Fatalf("%d processes carry %s (%s); want at least %d (supervisors and agents)", len(ps), c.marker, ktest.Describe(ps), want)
	}
	return ps
}

// marked is procs without a count.
func (c *chain) marked() []ktest.Proc {
	all := ktest.WithMarker(c.marker)
	agent := map[int]bool{}
	for _, p := range all {
		if argv := ktest.Cmdline(p.PID); len(argv) == 4 && argv[0] == "/bin/sh" && argv[1] == "-c" && argv[3] == c.marker {
			agent[p.PID] = true
		}
	}
	var ps []ktest.Proc
	for _, p := range all {
		st, err := ktest.ReadStat(p.PID)
		if err != nil || p.PID == c.cmd.Process.Pid || agent[st.PPID] {
			continue
		}
		ps = append(ps, p)
	}
	return ps
}

// chainDead fails unless every one of ps is dead within chainCeiling of
// since, and returns how long that took.
func chainDead(t *testing.T, ps []ktest.Proc, since time.Time, what string) time.Duration {
	t.Helper()
	took, left := ktest.WaitDead(ps, since, chainCeiling)
	if len(left) > 0 {
		for _, p := range left {
			syscall.Kill(p.PID, syscall.SIGKILL)
		}
		t.Fatalf("%s: %s still run %v later", what, ktest.Describe(left), took)
	}
	return took
}

func chainMarker(tag string) string {
	return fmt.Sprintf("dw-chain-%s-%d-%d", tag, os.Getpid(), time.Now().UnixNano()%1e9)
}

// TestChainControllerKilled: a Go and a Python controller start 3 boxes
// each (from the main thread, and from a thread that exits right after
// the fork), wait until all are ready, and are SIGKILLed: no supervisor
// and no agent survives, and reconcile at the controller's restart
// finds nothing blocked. A box started from a thread that exited lives
// on while its controller does.
func TestChainControllerKilled(t *testing.T) {
	const n = 3
	for _, r := range rigs(t) {
		for _, c := range []struct{ lang, mode string }{{"go", "main"}, {"go", "thread"}, {"python", "main"}, {"python", "thread"}} {
			t.Run(r.Name+"/"+c.lang+"-"+c.mode, func(t *testing.T) {
				r.setup(t)
				marker := chainMarker(c.lang + c.mode)
				ctl := startChain(t, r, c.lang, c.mode, n, nil, marker, chainAgent(marker, false)...)
				ctl.until("ready")
				ps := ctl.procs(2 * n)
				if c.mode == "thread" {
					time.Sleep(2 * time.Second)
					for _, p := range ps {
						if !p.Alive() {
							t.Fatalf("the thread that started the supervisor exited and %s died with it; the controller lives", ktest.Describe([]ktest.Proc{p}))
						}
					}
				}
				took := chainDead(t, ps, ctl.kill(), "after SIGKILL of the controller")
				t.Logf("%s: controller SIGKILL → last of %d supervisors and agents dead: %v", r.Name, len(ps), took)
				if !ktest.WaitFor(chainCeiling, func() bool { return len(r.boxes(r.Instance)) == 0 }) {
					t.Fatalf("boxes %v left after the controller's death", r.boxes(r.Instance))
				}
				code, rep, stderr := r.reconcile(r.Instance)
				if code != 0 || len(rep.Blocked) != 0 {
					t.Fatalf("reconcile at restart: exit %d, blocked %+v (%s)", code, rep.Blocked, stderr)
				}
			})
		}
	}
}

// TestChainControllerFD: a controller starts each supervisor through a
// shell (`sh -c 'supervisor exec --controller-fd 3 …; echo done'`) and
// holds the pipe's only write end: its SIGKILL ends the boxes although
// the shells, the supervisors' parents, live.
func TestChainControllerFD(t *testing.T) {
	const n = 2
	for _, r := range rigs(t) {
		t.Run(r.Name, func(t *testing.T) {
			r.setup(t)
			marker := chainMarker("fd")
			ctl := startChain(t, r, "go", "fdshell", n, nil, marker, append([]string{"--controller-fd", "3"}, chainAgent(marker, false)...)...)
			ctl.until("ready")
			ps := ctl.procs(2 * n)
			at := ctl.kill()
			took := chainDead(t, ps, at, "after SIGKILL of the controller (--controller-fd through a shell)")
			t.Logf("%s: controller SIGKILL → last supervisor and agent dead through --controller-fd: %v", r.Name, took)
			if !ktest.WaitFor(chainCeiling, func() bool { return len(r.boxes(r.Instance)) == 0 }) {
				t.Fatalf("boxes %v left", r.boxes(r.Instance))
			}
			// The shells outlived the controller and their supervisors.
			if !ktest.WaitFor(chainCeiling, func() bool { b, _ := os.ReadFile(ctl.stderr); return strings.Count(string(b), "done\n") == n }) {
				b, _ := os.ReadFile(ctl.stderr)
				t.Fatalf("the shells did not live on to say done:\n%s", b)
			}
		})
	}
}

// TestChainParentGoneFirst: the controller dies after it forked the
// supervisor and before the supervisor took its handle on it (the
// supervisor stopped at its before-watch point): the supervisor starts
// no box and journals nothing.
func TestChainParentGoneFirst(t *testing.T) {
	for _, r := range rigs(t) {
		t.Run(r.Name, func(t *testing.T) {
			r.setup(t)
			marker := chainMarker("first")
			ctl := startChain(t, r, "go", "stopped", 1, []string{supervisortest.CrashPointEnv + "=" + supervisortest.CrashBeforeWatch}, marker, chainAgent(marker, false)...)
			pid, _ := strconv.Atoi(strings.TrimPrefix(ctl.until("stopped "), "stopped "))
			st, err := ktest.ReadStat(pid)
			if err != nil {
				t.Fatal(err)
			}
			sup := ktest.Proc{PID: pid, Start: st.Start}
			ctl.kill()
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			chainDead(t, []ktest.Proc{sup}, time.Now(), "the supervisor whose parent was gone")
			b, _ := os.ReadFile(ctl.stderr)
			if !strings.Contains(string(b), "no box was started") {
				t.Errorf("the supervisor's stderr does not say it started no box:\n%s", b)
			}
			if js, _ := filepath.Glob(filepath.Join(r.JournalDir(), r.Instance, "*.json")); len(js) != 0 {
				t.Errorf("journal entries %v: the supervisor went on although its parent was gone", js)
			}
			if bs := r.boxes(r.Instance); len(bs) != 0 {
				t.Errorf("boxes %v were made", bs)
			}
		})
	}
}

// TestChainEPIPE: a controller closes its read end of the supervisor's
// stdout while the agent prints: the box ends, and the exit says why
// (249, output-lost).
func TestChainEPIPE(t *testing.T) {
	for _, r := range rigs(t) {
		t.Run(r.Name, func(t *testing.T) {
			r.setup(t)
			marker := chainMarker("epipe")
			events := filepath.Join(r.Dir, "events")
			ctl := startChain(t, r, "go", "epipe", 1, nil, marker, append([]string{"--events", events}, chainAgent(marker, true)...)...)
			ctl.until("ready")
			exit := ctl.until("exit ")
			// The supervisor removed the box before it exited.
			if left := ctl.marked(); len(left) > 0 {
				t.Errorf("after the supervisor's exit %s still run", ktest.Describe(left))
			}
			if exit != fmt.Sprintf("exit %d", 249) {
				b, _ := os.ReadFile(ctl.stderr)
				t.Fatalf("supervisor %s, want exit 249 (controller lost); stderr:\n%s", exit, b)
			}
			if reason := exitedReason(t, events); reason != "output-lost" {
				t.Errorf("exited event reason %q, want output-lost", reason)
			}
		})
	}
}

// TestChainReconcileOrphan: supervisors started with --detach outlive
// their killed controller; reconcile then ends them (their controller is
// proven gone) and removes their boxes, and leaves alone the one whose
// controller lives.
func TestChainReconcileOrphan(t *testing.T) {
	for _, r := range rigs(t) {
		t.Run(r.Name, func(t *testing.T) {
			r.setup(t)
			dead, live := chainMarker("orphan"), chainMarker("kept")
			a := startChain(t, r, "go", "main", 2, nil, dead, append([]string{"--detach"}, chainAgent(dead, false)...)...)
			a.until("ready")
			b := startChain(t, r, "go", "main", 1, nil, live, append([]string{"--detach"}, chainAgent(live, false)...)...)
			b.until("ready")
			orphans, kept := a.procs(4), b.procs(2)
			a.kill()
			time.Sleep(time.Second)
			for _, p := range orphans {
				if !p.Alive() {
					t.Fatalf("--detach: %s died with its controller", ktest.Describe([]ktest.Proc{p}))
				}
			}
			at := time.Now()
			code, rep, stderr := r.reconcile(r.Instance)
			took := chainDead(t, orphans, at, "after reconcile of the orphans")
			t.Logf("%s: reconcile → orphan supervisors and agents dead: %v", r.Name, took)
			orphaned := 0
			for _, it := range rep.Removed {
				if it.Owner == reconcile.OwnerOrphan {
					orphaned++
				}
			}
			if code != 247 || orphaned != 2 || len(rep.Blocked) != 1 || rep.Blocked[0].Owner != reconcile.OwnerAlive {
				t.Fatalf("reconcile: exit %d, removed %+v, blocked %+v (%s); want the 2 orphans removed and the live controller's box blocked", code, rep.Removed, rep.Blocked, stderr)
			}
			for _, p := range kept {
				if !p.Alive() {
					t.Fatalf("reconcile ended %s, whose controller lives", ktest.Describe([]ktest.Proc{p}))
				}
			}
			// Its controller gone too, the last one is an orphan as well.
			b.kill()
			if code, rep, stderr := r.reconcile(r.Instance); code != 0 || len(rep.Blocked) != 0 {
				t.Fatalf("second reconcile: exit %d, blocked %+v (%s)", code, rep.Blocked, stderr)
			}
			chainDead(t, kept, time.Now(), "after the second reconcile")
		})
	}
}

// TestChainSbx: the Go controller starts 2 sbx boxes (the emulator of
// the documented CLI) and is SIGKILLed: no supervisor and no agent
// survives, and the supervisors removed their sandboxes themselves.
func TestChainSbx(t *testing.T) {
	r := newSbxRig(t)
	marker := chainMarker("sbx")
	sup := append([]string{r.bin.Supervisor, "--instance", r.instance, "--journal", r.journal, "exec", "--runtime", "sbx", "--template", r.template}, chainAgent(marker, false)...)
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Env = r.s.Env
		return cmd
	}
	c := runChain(t, chainController(t, "go", "main", 2, t.TempDir(), command, sup), marker, t.TempDir(), func() { runCmd(r.supervisor(nil, "reconcile")) })
	c.until("ready")
	ps := c.procs(4)
	took := chainDead(t, ps, c.kill(), "sbx: after SIGKILL of the controller")
	t.Logf("sbx: controller SIGKILL → last of %d supervisors and agents dead: %v", len(ps), took)
	if res := runCmd(r.supervisor(nil, "reconcile")); res.code != 0 {
		t.Errorf("reconcile at restart: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	r.assertClean("after the controller's death")
}
