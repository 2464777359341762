package kerneltests

import (
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// Signals sent at an init from the moment it catches them, before its
// agent exists: none may be lost. Tini blocks every signal before it
// forks and forwards what is pending once its child exists (the kernel
// merges the repeats of a standard signal and queues those of a
// real-time one); a signal sent before it blocks them meets SIG_DFL,
// which the kernel drops for PID 1. The watcher catches every signal
// from the start of main; /proc/PID/status shows its catch complete
// once SigCgt has signal 34, the last it installs and one the Go
// runtime never catches itself. Before that, the runtime's own handlers
// run (they end the process for SIGTERM, SIGINT and SIGHUP): that
// window is the runtime's start, docs/watcher.md's "from the start of main".

// burstSignals are the signals TestWatcherSignalBurst sends: those
// both tini and the watcher forward and an agent started with every
// signal blocked keeps pending under both. Left out: SIGKILL and
// SIGSTOP (no one catches them); SIGCHLD, SIGTTIN and SIGTTOU (neither
// forwards them); SIGURG, SIGPROF and 33 (the Go runtime's, see
// docs/watcher.md); 32 (glibc cannot block it); SIGCONT and SIGTSTP (the kernel
// drops a pending stop signal when SIGCONT comes and a pending SIGCONT
// when a stop signal comes: which one stays depends on the order they
// are forwarded in); and the signals the Go runtime unblocks at start
// (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGABRT, SIGSYS, the faults, 34):
// the watcher's agent starts with those unblocked (a documented limit),
// so the first one forwarded ends it. TestWatcherSignalsBeforeAgent
// covers each of those.
func burstSignals() []syscall.Signal {
	var sigs []syscall.Signal
	for s := syscall.Signal(1); s <= 64; s++ {
		switch s {
		case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCHLD, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGURG, syscall.SIGPROF, 32, 33,
			syscall.SIGCONT, syscall.SIGTSTP,
			syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGABRT, syscall.SIGSYS, syscall.SIGSTKFLT,
			syscall.SIGILL, syscall.SIGTRAP, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, 34:
			continue
		}
		sigs = append(sigs, s)
	}
	return sigs
}

// blockAllScript blocks every signal glibc lets it (all but 32 and 33)
// and execs the rest of the command line.
const blockAllScript = `use POSIX; sigprocmask(SIG_BLOCK, POSIX::SigSet->new(grep { $_ < 32 || $_ > 33 } 1..64)) or die "sigprocmask: $!"; exec @ARGV or die "exec: $!";`

// sigMask parses a hexadecimal signal set of /proc/PID/status.
func sigMask(pid int, field string) (uint64, error) {
	v, err := ktest.StatusField(pid, field)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
}

func sigBit(s syscall.Signal) uint64 { return 1 << (uint(s) - 1) }

// sigNames lists the signals of a set.
func sigNames(set uint64) string {
	var names []string
	for s := syscall.Signal(1); s <= 64; s++ {
		if set&sigBit(s) != 0 {
			if n := unix.SignalName(s); n != "" {
				names = append(names, n)
			} else {
				names = append(names, strconv.Itoa(int(s)))
			}
		}
	}
	return strings.Join(names, " ")
}

// waitCatching waits until pid runs bin and, for the watcher, until
// SigCgt shows signal 34 caught (see above; SigBlk would not do: the
// runtime blocks every signal on a thread for a moment whenever it
// makes another). It polls as fast as it can: the burst is to start
// the moment the init catches signals. False on timeout.
func waitCatching(pid int, bin string, watcher bool, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if a := ktest.Cmdline(pid); len(a) > 0 && a[0] == bin {
			if !watcher {
				return true
			}
			if cgt, err := sigMask(pid, "SigCgt"); err == nil && cgt&sigBit(34) != 0 {
				return true
			}
		}
		time.Sleep(50 * time.Microsecond)
	}
	return false
}

// initOf waits for the child that unshare (pid) forked, the init.
func initOf(t *testing.T, pid int) int {
	t.Helper()
	children := fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)
	init := 0
	if !ktest.WaitFor(30*time.Second, func() bool {
		b, _ := os.ReadFile(children)
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return false
		}
		init, _ = strconv.Atoi(f[0])
		return init > 0
	}) {
		t.Fatalf("unshare (pid %d) started no init", pid)
	}
	return init
}

// hasChild reports whether pid has a child process.
func hasChild(pid int) bool {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	return len(strings.Fields(string(b))) > 0
}

// TestWatcherSignalBurst: as PID 1 started with every signal blocked
// (tini's own test setup; the agent inherits the mask, so what reaches
// it stays pending where /proc shows it), each of burstSignals once,
// SIGUSR1 three times and signal 40 four times, sent from the moment
// the init catches signals, before its agent exists or while it
// starts. The agent ends up with every one of them pending and nothing
// else, as under tini, and the init survives it. A signal blocked at
// start is one the watcher leaves to os/signal (its own handler would
// never run): this is that path under a burst.
func TestWatcherSignalBurst(t *testing.T) {
	perl := ktest.RequireCmd(t, "perl")
	sigs := burstSignals()
	var want uint64
	for _, s := range sigs {
		want |= sigBit(s)
	}
	// Repeats: merged by the kernel for a standard signal, queued for a
	// real-time one.
	repeats := map[syscall.Signal]int{syscall.SIGUSR1: 2, 40: 3}
	for _, in := range parityInits(t) {
		t.Run(in.name, func(t *testing.T) {
			marker := fmt.Sprintf("1000.%06d", mrand.IntN(1000000))
			argv := append([]string{in.standin, "sigdefault", "--", perl, "-e", blockAllScript},
				in.argv(true, bbox, "sleep", marker)...)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = ktest.WatcherEnv()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			defer func() { killTree(cmd.Process.Pid); <-done }()

			init := initOf(t, cmd.Process.Pid)
			if !waitCatching(init, in.bin, in.watcher, 30*time.Second) {
				t.Fatalf("%s (pid %d) did not start catching signals within 30 s", in.name, init)
			}
			agentBefore := hasChild(init)
			start := time.Now()
			sent := 0
			for _, s := range sigs {
				for i := 0; i <= repeats[s]; i++ {
					if err := syscall.Kill(init, s); err != nil {
						t.Fatalf("signal %d to the init: %v", int(s), err)
					}
					sent++
				}
			}
			burst := time.Since(start)
			agentAfter := hasChild(init)

			var agent int
			var pending uint64
			ok := ktest.WaitFor(2*ktest.Slack, func() bool {
				select {
				case <-done: // the init is gone: nothing more will come
					return true
				default:
				}
				if agent == 0 {
					for _, p := range ktest.WithMarker(marker) {
						if a := ktest.Cmdline(p.PID); len(a) > 0 && a[0] == bbox {
							agent = p.PID
						}
					}
					if agent == 0 {
						return false
					}
				}
				shd, err1 := sigMask(agent, "ShdPnd")
				thr, err2 := sigMask(agent, "SigPnd")
				if err1 != nil || err2 != nil {
					return false
				}
				pending = shd | thr
				return pending == want
			})
			ok = ok && pending == want
			t.Logf("%s: %d signals (%d distinct) sent in %s from the moment it caught them; agent existed before the burst: %v, after: %v; the agent has pending %s",
				in.name, sent, len(sigs), burst, agentBefore, agentAfter, sigNames(pending))
			alive := false
			select {
			case <-done:
			default:
				st, err := ktest.ReadStat(init)
				alive = err == nil && st.State != 'Z'
			}
			if !in.watcher {
				if !ok || !alive {
					t.Logf("note: %s: missing %s, extra %s, init alive %v", in.name, sigNames(want&^pending), sigNames(pending&^want), alive)
				}
				return
			}
			if !alive {
				t.Fatalf("the watcher died of the burst")
			}
			if !ok {
				ab, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", agent))
				ib, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", init))
				t.Errorf("after %s the agent has pending %s; missing %s, extra %s\nagent %d %q\ninit %d:\n%s\nagent:\n%s", 2*ktest.Slack, sigNames(pending), sigNames(want&^pending), sigNames(pending&^want), agent, ktest.Cmdline(agent), init, ib, ab)
			}
		})
	}
}

// TestWatcherSignalsBeforeAgent: in control mode, as PID 1, with
// nothing blocked (the watcher's own handler takes every signal), each
// forwarded signal whose default action ends a process is sent three
// times from the moment the watcher catches signals, before the host
// sent the spec: the agent, started afterwards, dies of it (its first
// copy; the repeats meet a dying process) and the exit record says so.
// SIGPIPE is left out: in control mode it is the watcher's own (a write
// to a closed pipe), never forwarded.
func TestWatcherSignalsBeforeAgent(t *testing.T) {
	bin := watcherBin(t)
	var sigs []syscall.Signal
	for _, s := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGABRT,
		syscall.SIGBUS, syscall.SIGFPE, syscall.SIGUSR1, syscall.SIGSEGV, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGTERM, syscall.SIGSTKFLT,
		syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGIO, syscall.SIGPWR, syscall.SIGSYS, 32, 34} {
		sigs = append(sigs, s)
	}
	for s := syscall.Signal(35); s <= 64; s++ {
		sigs = append(sigs, s)
	}
	var lost []string
	for _, s := range sigs {
		c := ktest.StartController(t, bin, ktest.Options{Control: ktest.ControlFD, PID1: true})
		init := initOf(t, c.Watcher.Process.Pid)
		if !waitCatching(init, bin, true, 30*time.Second) {
			t.Fatalf("the watcher (pid %d) never showed signal 34 caught\n%s", init, c.Diagnostics())
		}
		for i := 0; i < 3; i++ {
			if err := syscall.Kill(init, s); err != nil {
				t.Fatalf("signal %d to the watcher: %v", int(s), err)
			}
		}
		c.Launch(shared.Spec{
			Argv: []string{bbox, "sleep", "30"}, Env: []string{agentPath},
			UID: shared.DefaultAgentUID, GID: shared.DefaultAgentGID, Grace: time.Second,
		})
		res := c.Wait(2 * ktest.Slack)
		want := shared.SignalStatus(int(s))
		if res.Code != want || res.Exit == nil || res.Exit.Reason != shared.ReasonSignaled || res.Exit.Signal != int(s) {
			lost = append(lost, fmt.Sprintf("signal %d: status %d, %s", int(s), res.Code, fmtExit(res.Exit)))
		}
	}
	t.Logf("%d signals sent three times each before the spec; %d not the agent's death: %v", len(sigs), len(lost), lost)
	if len(lost) > 0 {
		t.Errorf("signals sent before the agent existed that did not reach it:\n%s", strings.Join(lost, "\n"))
	}
}

// TestWatcherAgentSignalDefaults: started with every signal at its
// default action and none blocked, the watcher starts its agent the
// same way, whatever it did with the signals itself: nothing ignored
// (SIGPIPE included, which the watcher marks ignored for the Go
// runtime under its own handler), nothing caught, nothing blocked.
func TestWatcherAgentSignalDefaults(t *testing.T) {
	bin := watcherBin(t)
	standin := ktest.StandinPath(t)
	for _, pid1 := range []bool{true, false} {
		t.Run(domainName(pid1), func(t *testing.T) {
			argv := append([]string{standin, "sigdefault", "--"}, ktest.WatcherArgv(bin, pid1, "--", bbox, "grep", "-E", "^Sig(Ign|Blk|Cgt)", "/proc/self/status")...)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = ktest.WatcherEnv()
			code, out, err := ktest.ExitStatus(cmd, 30*time.Second)
			if err != nil || code != 0 {
				t.Fatalf("exit %d (%v): %q", code, err, out)
			}
			st := ktest.ParseStatus(out)
			t.Logf("agent: SigIgn %s SigBlk %s SigCgt %s", st["SigIgn"], st["SigBlk"], st["SigCgt"])
			for _, f := range []string{"SigIgn", "SigBlk", "SigCgt"} {
				if v, err := strconv.ParseUint(strings.TrimSpace(st[f]), 16, 64); err != nil || v != 0 {
					t.Errorf("the agent's %s is %q (%s), want none", f, st[f], sigNames(v))
				}
			}
		})
	}
}
