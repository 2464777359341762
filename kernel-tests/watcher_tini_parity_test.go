package kerneltests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"deathwatch/kernel-tests/ktest"
)

// The watcher as a tini drop-in (issue 11), each behaviour beside
// Debian's tini and dumb-init run on the same commands as controls:
// their figures are logged, the watcher's are asserted.

// parityInit is one init under test and how it is told to run a command.
type parityInit struct {
	name, bin string
	watcher   bool
	standin   string // ktest's standin: its sigdefault mode starts the init
}

func (p parityInit) argv(pid1 bool, argv ...string) []string {
	var args []string
	switch {
	case p.name == "tini" && !pid1:
		args = []string{"-s", "--"} // reap as a subreaper
	case p.name != "dumb-init":
		args = []string{"--"}
	}
	return ktest.WatcherArgv(p.bin, pid1, append(args, argv...)...)
}

// command runs the init with every signal at its default action: a
// signal the test itself was started with ignored would stay ignored
// through the init, as it must (TestTiniParitySignalState), and hide
// what these tests look for. GNU make starts its commands with signals
// 32 and 33 ignored, so under `make test` every test has them ignored;
// glibc refuses to reset those two (`env --default-signal` cannot), the
// standin's sigdefault mode does it with the raw system call.
func (p parityInit) command(pid1 bool, argv ...string) *exec.Cmd {
	full := append([]string{p.standin, "sigdefault", "--"}, p.argv(pid1, argv...)...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env = ktest.WatcherEnv()
	return cmd
}

// parityInits are the watcher, tini and dumb-init (failing when a
// control is not installed).
func parityInits(t *testing.T) []parityInit {
	t.Helper()
	standin := ktest.StandinPath(t)
	return []parityInit{
		{"watcher", watcherBin(t), true, standin},
		{"tini", tiniBin(t), false, standin},
		{"dumb-init", ktest.RequireCmd(t, "dumb-init"), false, standin},
	}
}

func domainName(pid1 bool) string {
	if pid1 {
		return "pid1"
	}
	return "ownns"
}

// ptyRun is a command whose stdin, stdout and stderr are a new pty,
// its controlling terminal, as under `docker run -it` or a login shell.
type ptyRun struct {
	cmd    *exec.Cmd
	master *os.File
	mu     sync.Mutex
	out    bytes.Buffer
	done   chan struct{} // closed when cmd.Wait returned
	read   chan struct{} // closed when the master reached EOF or an error
}

func startPty(t *testing.T, cmd *exec.Cmd) *ptyRun {
	t.Helper()
	r := &ptyRun{cmd: cmd, done: make(chan struct{}), read: make(chan struct{})}
	master, err := pty.Start(cmd)
	if err != nil {
		t.Fatalf("start %s on a pty: %v", cmd.Args[0], err)
	}
	r.master = master
	go func() {
		defer close(r.read)
		var b [4096]byte
		for {
			n, err := master.Read(b[:])
			r.mu.Lock()
			r.out.Write(b[:n])
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		killTree(cmd.Process.Pid)
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
		}
		master.Close()
	})
	return r
}

func (r *ptyRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

func (r *ptyRun) waitOutput(s string, timeout time.Duration) bool {
	return ktest.WaitFor(timeout, func() bool { return strings.Contains(r.output(), s) })
}

func (r *ptyRun) wait(timeout time.Duration) (int, bool) {
	select {
	case <-r.done:
	case <-time.After(timeout):
		return -1, false
	}
	select { // what the command wrote last
	case <-r.read:
	case <-time.After(5 * time.Second):
	}
	return r.cmd.ProcessState.ExitCode(), true
}

// keyScript traps SIGINT and SIGQUIT, says which it got, and exits 1 s
// (20 naps) after the first, time enough for a second copy to arrive.
// It naps in a builtin read from a FIFO no one writes, not in sleep: a
// shell waiting for a child runs a trap once however many copies of
// the signal came meanwhile.
const keyScript = `f=/dev/shm/dwk-fifo-$$; mkfifo $f; exec 3<>$f; rm $f; ` +
	`trap 'echo got-INT; n=1' INT; trap 'echo got-QUIT; n=1' QUIT; echo ready; ` +
	`c=0; while [ $c -lt 20 ]; do read -t 0.05 _ <&3; [ -n "$n" ] && c=$((c+1)); done; echo finished`

// typeKeys types ^C and then ^\ on r's terminal and returns how many
// SIGINTs and SIGQUITs the script saw.
func typeKeys(t *testing.T, r *ptyRun, what string) (ints, quits int) {
	t.Helper()
	if !r.waitOutput("ready", 30*time.Second) {
		t.Fatalf("%s: the agent did not start: %q", what, r.output())
	}
	for _, k := range []struct{ key, seen string }{{"\x03", "got-INT"}, {"\x1c", "got-QUIT"}} {
		if _, err := r.master.Write([]byte(k.key)); err != nil {
			t.Fatal(err)
		}
		if !r.waitOutput(k.seen, 10*time.Second) {
			t.Logf("%s: %q typed, the agent did not see it in 10 s: %q", what, k.key, r.output())
		}
	}
	if !r.waitOutput("finished", 30*time.Second) {
		t.Logf("%s: the agent did not finish: %q", what, r.output())
	}
	out := r.output()
	return strings.Count(out, "got-INT"), strings.Count(out, "got-QUIT")
}

// TestTiniParityTerminalKeys: one ^C and one ^\ typed on the terminal
// reach the agent once each: the agent is the terminal's foreground
// process group and the watcher is not in it, so nothing is forwarded
// twice.
func TestTiniParityTerminalKeys(t *testing.T) {
	for _, pid1 := range []bool{true, false} {
		for _, in := range parityInits(t) {
			t.Run(domainName(pid1)+"/"+in.name, func(t *testing.T) {
				r := startPty(t, in.command(pid1, bbox, "sh", "-c", keyScript))
				ints, quits := typeKeys(t, r, in.name)
				t.Logf("%s (%s): one ^C → %d SIGINT, one ^\\ → %d SIGQUIT", in.name, domainName(pid1), ints, quits)
				if in.watcher && (ints != 1 || quits != 1) {
					t.Errorf("the agent got %d SIGINT and %d SIGQUIT for one key each, want 1 and 1\n%s", ints, quits, r.output())
				}
			})
		}
	}
}

// TestTiniParityKillZero: the agent's `kill 0` reaches its own process
// group, never the caller of the init (here a shell that traps SIGUSR1
// and runs the init in its own process group).
func TestTiniParityKillZero(t *testing.T) {
	for _, pid1 := range []bool{true, false} {
		for _, in := range parityInits(t) {
			t.Run(domainName(pid1)+"/"+in.name, func(t *testing.T) {
				agent := []string{bbox, "sh", "-c", `trap '' USR1; kill -USR1 0; echo agent-sent`}
				args := append([]string{"sh", "-c", `trap 'echo caller-got-USR1' USR1; "$@"; echo caller-done`, "caller"}, in.argv(pid1, agent...)...)
				cmd := exec.Command(bbox, args...)
				cmd.Env = ktest.WatcherEnv()
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				code, out, err := ktest.ExitStatus(cmd, 30*time.Second)
				t.Logf("%s (%s): exit %d, %q", in.name, domainName(pid1), code, out)
				if err != nil || !strings.Contains(out, "agent-sent") || !strings.Contains(out, "caller-done") {
					t.Fatalf("the caller did not run to its end: %v, %q", err, out)
				}
				if in.watcher && strings.Contains(out, "caller-got-USR1") {
					t.Errorf("the agent's kill 0 reached the shell that started the watcher")
				}
			})
		}
	}
}

// TestTiniParityOwnProc: a watcher that is not PID 1 gives the box a
// /proc of its PID namespace: /proc/$$ is the agent, ps works and lists
// the box only, and the caller's /proc is untouched.
func TestTiniParityOwnProc(t *testing.T) {
	bin := watcherBin(t)
	ps := ktest.RequireCmd(t, "ps")
	marker := newMarker(t)
	script := `tr '\0' ' ' < /proc/$$/cmdline; echo; echo self=$(readlink /proc/self); ` + ps + ` -e -o pid=,args=; echo ps-status=$?`
	cmd := plainCmd(bin, false, nil, bbox, "sh", "-c", script, marker)
	code, out, err := ktest.ExitStatus(cmd, 30*time.Second)
	t.Logf("exit %d:\n%s", code, out)
	if err != nil || code != 0 {
		t.Fatalf("exit %d (%v)", code, err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.Contains(lines[0], marker) {
		t.Errorf("/proc/$$/cmdline of the agent is %q, not the agent's (%s)", lines[0], marker)
	}
	if !strings.Contains(out, "ps-status=0") {
		t.Errorf("ps failed in the box")
	}
	var listed []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 1 {
			if _, err := strconv.Atoi(f[0]); err == nil {
				listed = append(listed, l)
			}
		}
	}
	if len(listed) == 0 || len(listed) > 5 || !strings.HasPrefix(strings.TrimSpace(listed[0]), "1 ") {
		t.Errorf("ps in the box lists %d processes %q, want the box's few, PID 1 first", len(listed), listed)
	}
	if self, err := os.Readlink("/proc/self"); err != nil || self != strconv.Itoa(os.Getpid()) {
		t.Errorf("the caller's /proc/self is %q (%v), want %d: the box's /proc leaked out", self, err, os.Getpid())
	}
}

// TestTiniParityInteractiveDash: an interactive dash on a terminal, the
// init not PID 1 (tini -s as the control), takes the terminal and exits
// 0 at `exit 0`.
func TestTiniParityInteractiveDash(t *testing.T) {
	dash := ktest.RequireCmd(t, "dash")
	for _, in := range parityInits(t)[:2] {
		t.Run(in.name, func(t *testing.T) {
			r := startPty(t, in.command(false, dash, "-i"))
			if !r.waitOutput("# ", 30*time.Second) {
				t.Fatalf("no prompt: %q", r.output())
			}
			if _, err := r.master.Write([]byte("echo dash-$((6*7)); exit 0\n")); err != nil {
				t.Fatal(err)
			}
			code, ok := r.wait(30 * time.Second)
			t.Logf("%s -- dash -i: exit %d, %q", in.name, code, r.output())
			if !ok {
				t.Fatalf("dash did not exit: %q", r.output())
			}
			if in.watcher && (code != 0 || !strings.Contains(r.output(), "dash-42") || strings.Contains(r.output(), "Cannot set tty")) {
				t.Errorf("interactive dash under the watcher: exit %d, output %q; want 0, dash-42 and no tty complaint", code, r.output())
			}
		})
	}
}

// signalRun starts in with an agent that exits 0 at sig, sends sig to
// the init the moment the agent says it is ready, and returns the init's
// status (see outcome; "lost" after 10 s).
func signalRun(t *testing.T, in parityInit, pid1 bool, sig syscall.Signal) string {
	t.Helper()
	r := startAgent(t, in, pid1, fmt.Sprintf(`trap 'exit 0' %d; echo ready; while :; do sleep 0.01; done`, int(sig)))
	defer r.stop()
	if err := syscall.Kill(r.init, sig); err != nil {
		t.Fatalf("signal the init: %v", err)
	}
	return outcome(r.cmd, r.done, 10*time.Second)
}

// agentRun is an init running a busybox script whose $0 is a marker.
type agentRun struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd.Wait returned
	marker string
	init   int // the pid to signal for the init
}

// startAgent starts in running script, which prints "ready" once it
// can take what the test sends, and returns as soon as it has (reading
// a pipe, not polling /proc: the early-signal window is a millisecond
// wide). The pid to signal is the PID 1 that unshare forked (what
// `docker kill` signals), else the init the test started. The caller
// defers stop.
func startAgent(t *testing.T, in parityInit, pid1 bool, script string) *agentRun {
	t.Helper()
	r := &agentRun{marker: fmt.Sprintf("dwk-parity-%d", mrand.Uint64()), done: make(chan struct{})}
	r.cmd = in.command(pid1, bbox, "sh", "-c", script, r.marker)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stdout, r.cmd.Stderr = pw, pw
	err = r.cmd.Start()
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	r.init = r.cmd.Process.Pid
	if pid1 {
		children := fmt.Sprintf("/proc/%d/task/%d/children", r.init, r.init)
		found := ktest.WaitFor(30*time.Second, func() bool {
			b, _ := os.ReadFile(children)
			f := strings.Fields(string(b))
			if len(f) == 0 {
				return false
			}
			r.init, err = strconv.Atoi(f[0])
			return err == nil
		})
		if !found {
			r.stop()
			t.Fatalf("%s: unshare started no init", in.name)
		}
	}
	ready := make(chan string, 1)
	go func() {
		// Read to the end: a closed pipe would be a SIGPIPE to whoever
		// writes next.
		br := bufio.NewReader(pr)
		line, _ := br.ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, br)
		pr.Close()
	}()
	select {
	case line := <-ready:
		if line != "ready\n" {
			r.stop()
			t.Fatalf("%s: the agent said %q, not ready", in.name, line)
		}
	case <-time.After(30 * time.Second):
		r.stop()
		t.Fatalf("%s: the agent was not ready after 30 s", in.name)
	}
	return r
}

func (r *agentRun) stop() {
	killTree(r.cmd.Process.Pid)
	for _, p := range ktest.WithMarker(r.marker) { // outside the tree once a control init died
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	<-r.done
}

// outcome waits up to timeout for done (closed when cmd.Wait returned)
// and says how cmd ended: "exit N", "killed by signal N", or "lost".
func outcome(cmd *exec.Cmd, done <-chan struct{}, timeout time.Duration) string {
	select {
	case <-done:
	case <-time.After(timeout):
		return "lost"
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return "killed by signal " + strconv.Itoa(int(ws.Signal()))
	}
	return "exit " + strconv.Itoa(ws.ExitStatus())
}

// TestTiniParityEarlySignals: SIGALRM and SIGWINCH sent to the init the
// moment the agent can take them, 50 times each, as PID 1: none lost.
func TestTiniParityEarlySignals(t *testing.T) {
	const runs = 50
	for _, in := range parityInits(t) {
		for _, sig := range []syscall.Signal{syscall.SIGALRM, syscall.SIGWINCH} {
			t.Run(in.name+"/"+unix.SignalName(sig), func(t *testing.T) {
				bad := map[string]int{}
				for i := 0; i < runs; i++ {
					if got := signalRun(t, in, true, sig); got != "exit 0" {
						bad[got]++
					}
				}
				n := 0
				for _, c := range bad {
					n += c
				}
				t.Logf("%s as PID 1: %d of %d early %s not delivered %v", in.name, n, runs, unix.SignalName(sig), bad)
				if in.watcher && n > 0 {
					t.Errorf("the watcher lost %d of %d early %s: %v", n, runs, unix.SignalName(sig), bad)
				}
			})
		}
	}
}

// TestTiniParityReservedSignals: signal 34 (glibc's SIGRTMIN) and
// 35-64 reach the agent and kill neither the watcher nor the box;
// signal 32 (which busybox cannot trap) reaches it too: the agent dies
// of it and the watcher reports 128+32.
func TestTiniParityReservedSignals(t *testing.T) {
	for _, pid1 := range []bool{true, false} {
		for _, in := range parityInits(t) {
			t.Run(domainName(pid1)+"/"+in.name, func(t *testing.T) {
				for _, sig := range []syscall.Signal{34, 35, 64} {
					got := signalRun(t, in, pid1, sig)
					t.Logf("%s (%s), signal %d: %s", in.name, domainName(pid1), int(sig), got)
					if in.watcher && got != "exit 0" {
						t.Errorf("signal %d: %s, want it forwarded (exit 0)", int(sig), got)
					}
				}
				r := startAgent(t, in, pid1, `echo ready; while :; do sleep 0.01; done`)
				defer r.stop()
				_ = syscall.Kill(r.init, 32)
				got := outcome(r.cmd, r.done, 5*time.Second)
				t.Logf("%s (%s), signal 32: %s", in.name, domainName(pid1), got)
				if in.watcher && got != "exit 160" {
					t.Errorf("signal 32: %s, want exit 160 (forwarded, the agent died of it)", got)
				}
			})
		}
	}
}

// sigconfScript is tini's signal-configuration test as a Perl launcher:
// SIGTTOU, SIGSEGV and SIGINT ignored, SIGTTIN, SIGILL and SIGTERM
// blocked, then exec of the rest of the command line.
const sigconfScript = `use POSIX; $SIG{TTOU}='IGNORE'; $SIG{SEGV}='IGNORE'; $SIG{INT}='IGNORE';
sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGTTIN, SIGILL, SIGTERM)); exec @ARGV or die "exec: $!";`

// TestTiniParitySignalState: the agent starts with the signals the init
// was started with ignored and blocked, as far as the Go runtime lets
// the watcher know them (docs/watcher.md lists what it hides: an inherited
// SIG_IGN of any signal but SIGHUP, SIGINT, the job-control signals and
// 32/34, and blocked signals the runtime unblocks at start). And
// `nohup watcher -- cmd` survives SIGHUP, as under tini.
func TestTiniParitySignalState(t *testing.T) {
	perl := ktest.RequireCmd(t, "perl")
	nohup := ktest.RequireCmd(t, "nohup")
	bit := func(s syscall.Signal) uint64 { return 1 << (uint(s) - 1) }
	wantIgn := bit(syscall.SIGINT) | bit(syscall.SIGTTOU)
	wantBlk := bit(syscall.SIGTTIN)
	for _, pid1 := range []bool{true, false} {
		for _, in := range parityInits(t) {
			t.Run(domainName(pid1)+"/"+in.name, func(t *testing.T) {
				argv := append([]string{perl, "-e", sigconfScript}, in.argv(pid1, bbox, "grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status")...)
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.Env = ktest.WatcherEnv()
				code, out, err := ktest.ExitStatus(cmd, 30*time.Second)
				st := ktest.ParseStatus(out)
				ign, _ := strconv.ParseUint(strings.TrimSpace(st["SigIgn"]), 16, 64)
				blk, _ := strconv.ParseUint(strings.TrimSpace(st["SigBlk"]), 16, 64)
				t.Logf("%s (%s): exit %d, agent SigIgn %016x SigBlk %016x (tini's test sets ignored %016x, blocked %016x)", in.name, domainName(pid1), code, ign, blk,
					bit(syscall.SIGTTOU)|bit(syscall.SIGSEGV)|bit(syscall.SIGINT), bit(syscall.SIGTTIN)|bit(syscall.SIGILL)|bit(syscall.SIGTERM))
				if err != nil || code != 0 {
					t.Fatalf("exit %d (%v): %q", code, err, out)
				}
				if in.watcher && (ign&wantIgn != wantIgn || blk&wantBlk != wantBlk) {
					t.Errorf("agent SigIgn %016x SigBlk %016x, want at least %016x and %016x", ign, blk, wantIgn, wantBlk)
				}

				argv = append([]string{nohup}, in.argv(pid1, bbox, "sh", "-c", `kill -HUP $$; echo survived`)...)
				cmd = exec.Command(argv[0], argv[1:]...)
				cmd.Env = ktest.WatcherEnv()
				cmd.Dir = t.TempDir()
				code, out, err = ktest.ExitStatus(cmd, 30*time.Second)
				t.Logf("nohup %s (%s) -- sh -c 'kill -HUP $$': exit %d, %q", in.name, domainName(pid1), code, out)
				if in.watcher && (err != nil || code != 0 || !strings.Contains(out, "survived")) {
					t.Errorf("under nohup the agent died of SIGHUP: exit %d (%v)", code, err)
				}
			})
		}
	}
}

// TestTiniParityEngineTerminal: `docker run -it` and `podman run -it`
// with the watcher as the container's init, on a pty: one ^C and one
// ^\ reach the agent once each. The engines' own inits (docker --init,
// podman --init) are the controls.
func TestTiniParityEngineTerminal(t *testing.T) {
	bin := watcherBin(t)
	for _, engine := range []string{"docker", "podman"} {
		ktest.RequireCmd(t, engine)
		image := ktest.DockerImage(t, engine)
		for _, init := range []string{"watcher", engine + "-init"} {
			t.Run(engine+"/"+init, func(t *testing.T) {
				name := fmt.Sprintf("dwk-tty-%d", mrand.Uint64())
				args := []string{"run", "--rm", "-it", "--name", name, "--network", "none"}
				switch {
				case init != "watcher":
					args = append(args, "--init", image)
				case engine == "podman":
					args = append(args, "--init", "--init-path", bin, image)
				default:
					args = append(args, "--entrypoint", ktest.ImageWatcher, image, "--")
				}
				args = append(args, "sh", "-c", keyScript)
				cmd := exec.Command(engine, args...)
				cmd.Env = append(ktest.WatcherEnv(), "HOME=/root", "TERM=xterm")
				t.Cleanup(func() { _ = exec.Command(engine, "rm", "-f", name).Run() })
				r := startPty(t, cmd)
				ints, quits := typeKeys(t, r, engine+" "+init)
				code, _ := r.wait(30 * time.Second)
				t.Logf("%s run -it with %s: one ^C → %d SIGINT, one ^\\ → %d SIGQUIT; exit %d", engine, init, ints, quits, code)
				if init == "watcher" && (ints != 1 || quits != 1) {
					t.Errorf("the agent got %d SIGINT and %d SIGQUIT for one key each, want 1 and 1\n%s", ints, quits, r.output())
				}
			})
		}
	}
}
