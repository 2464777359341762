package kerneltests

import (
	"bufio"
	"bytes"
	"deathwatch/supervisor/journal"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/runtime/native"
)

// `supervisor exec --runtime native` end to end: exit codes come back,
// and on SIGINT/SIGTERM the box is stopped, removed (cgroup and record)
// and the journal says so.

func nativeExec(bins ktest.Binaries, journal string, extra ...string) *exec.Cmd {
	args := append([]string{"exec", "--runtime", "native", "--instance", "ktest-exec", "--journal", journal, "--watcher", bins.Watcher, "--pids-limit", "100"}, extra...)
	return exec.Command(bins.Supervisor, args...)
}

func TestNativeExecExitCodes(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	journal := sharedTempDir(t)
	for _, c := range []struct {
		name string
		argv []string
		want int
	}{
		{"zero", []string{"/bin/true"}, 0},
		{"seven", []string{"/bin/sh", "-c", "exit 7"}, 7},
		{"signal", []string{"/bin/sh", "-c", "kill -USR1 $$"}, shared.SignalStatus(int(syscall.SIGUSR1))},
		{"not-found", []string{"/no/such/command"}, shared.ExitNotFound},
		{"deadline", []string{"/bin/sleep", "10"}, shared.ExitDeadline},
	} {
		t.Run(c.name, func(t *testing.T) {
			extra := []string{}
			if c.name == "deadline" {
				extra = append(extra, "--deadline", "300ms", "--grace", "100ms")
			}
			cmd := nativeExec(bins, journal, append(append(extra, "--"), c.argv...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			got := 0
			if ee, ok := err.(*exec.ExitError); ok {
				got = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("exit %d, want %d (stderr %q)", got, c.want, stderr.String())
			}
		})
	}
	assertAllRemoved(t, journal)
}

// assertAllRemoved: every journal entry is closed and no box cgroup or
// record is left.
func assertAllRemoved(t *testing.T, dir string) {
	t.Helper()
	j, err := journal.Open(dir, "ktest-exec", nil)
	if err != nil {
		t.Fatal(err)
	}
	es, _, err := j.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Open() {
			t.Errorf("journal entry %s (%s) is still open", e.LaunchID, e.State)
		}
		b := &supervisor.Box{Name: e.Box, State: e.RuntimeState}
		if e.RuntimeState[native.StateCgroup] != "" {
			for _, d := range cgroupDirs(t, b) {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Errorf("cgroup %s left behind", d)
				}
			}
		}
		if _, err := os.Stat("/run/deathwatch/native/" + e.Box + ".json"); !os.IsNotExist(err) {
			t.Errorf("record of %s left behind", e.Box)
		}
	}
}

func TestNativeExecSignals(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			journal := sharedTempDir(t)
			cmd := nativeExec(bins, journal, "--grace", "200ms", "--", "/bin/sh", "-c", longAgent)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("agent not ready: %q %v (stderr %q)", line, err, stderr.String())
			}
			var init int
			for _, p := range ktest.Descendants(cmd.Process.Pid) {
				if st, err := ktest.ReadStat(p.PID); err == nil && st.PPID == cmd.Process.Pid {
					init = p.PID
				}
			}
			ns, err := ktest.PIDNamespace(init)
			if err != nil {
				t.Fatalf("box init: %v", err)
			}
			box := ktest.InNamespace(ns)
			start := time.Now()
			cmd.Process.Signal(sig)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("supervisor still running 10s after %v", sig)
			}
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			took, left := ktest.WaitDead(box, start, ktest.Slack)
			t.Logf("%v: supervisor exit %d after %v; box processes dead after %v; stderr %q", sig, code, time.Since(start), took, strings.TrimSpace(stderr.String()))
			if len(left) > 0 {
				t.Errorf("%s still alive", ktest.Describe(left))
			}
			if code == 0 {
				t.Errorf("exit 0 after %v; want the stop's status", sig)
			}
			assertAllRemoved(t, journal)
		})
	}
}

// A secret passed with --env reaches the agent and nothing else: not
// the box init's environment or argv, not the journal, not the record.
func TestNativeExecSecret(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	journal := sharedTempDir(t)
	secret := "s3cr3t-" + boxName(t)
	cmd := nativeExec(bins, journal, "--env", "DW_SECRET", "--", "/bin/sh", "-c", `echo "agent=$DW_SECRET"; echo ready; sleep 100`)
	cmd.Env = append(os.Environ(), "DW_SECRET="+secret)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait(); assertAllRemoved(t, journal) }()
	r := bufio.NewReader(out)
	first, _ := r.ReadString('\n')
	second, _ := r.ReadString('\n')
	if first != "agent="+secret+"\n" || second != "ready\n" {
		t.Fatalf("agent printed %q %q", first, second)
	}
	var leaks []string
	for _, p := range append(ktest.Descendants(cmd.Process.Pid), ktest.Proc{PID: cmd.Process.Pid}) {
		argv := strings.Join(ktest.Cmdline(p.PID), " ")
		if strings.Contains(argv, secret) {
			leaks = append(leaks, "argv of "+argv)
		}
		// The box init (the watcher, the supervisor's child) must not hold
		// it; the agent and its children do, the supervisor got it from us.
		env, _ := os.ReadFile("/proc/" + p.String() + "/environ")
		st, _ := ktest.ReadStat(p.PID)
		if bytes.Contains(env, []byte(secret)) && st.PPID == cmd.Process.Pid {
			leaks = append(leaks, "environ of the box init "+st.Comm)
		}
	}
	for _, dir := range []string{journal, "/run/deathwatch/native"} {
		filepathWalk(dir, func(p string, b []byte) {
			if bytes.Contains(b, []byte(secret)) {
				leaks = append(leaks, p)
			}
		})
	}
	if len(leaks) > 0 {
		t.Errorf("the secret leaked into: %v", leaks)
	}
}

func filepathWalk(dir string, f func(string, []byte)) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		p := dir + "/" + e.Name()
		if e.IsDir() {
			filepathWalk(p, f)
			continue
		}
		if b, err := os.ReadFile(p); err == nil {
			f(p, b)
		}
	}
}
