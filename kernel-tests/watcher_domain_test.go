package kerneltests

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// TestWatcherRefusesWithoutKillDomain: a watcher that is not PID 1 and
// cannot create a PID namespace exits 243 with one line on stderr and
// never starts the agent. The test takes PID namespaces away with a user
// namespace whose max_pid_namespaces is 0.
func TestWatcherRefusesWithoutKillDomain(t *testing.T) {
	bin := watcherBin(t)
	dir := readyDir(t)
	for _, mode := range []struct{ name, args string }{
		{"plain", `-- ` + bbox + ` touch "$1/agent-ran"`},
		{"control", `--control=stdin`},
	} {
		t.Run(mode.name, func(t *testing.T) {
			script := `echo 0 > /proc/sys/user/max_pid_namespaces || exit 99; exec "$0" ` + mode.args + ` </dev/null`
			cmd := exec.Command("unshare", "--user", "--map-root-user", bbox, "sh", "-c", script, bin, dir)
			cmd.Env = ktest.WatcherEnv()
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := cmd.ProcessState.ExitCode()
			t.Logf("exit %d; stderr %q", code, stderr.String())
			if code == 99 {
				t.Fatalf("cannot set max_pid_namespaces in a user namespace: the test needs a kernel with per-userns limits (4.9+)")
			}
			if err == nil || code != shared.ExitRefused {
				t.Errorf("exit status %d (%v), want %d (refused)", code, err, shared.ExitRefused)
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "watcher: ") {
				t.Errorf("stderr is %d lines %q, want one line starting with \"watcher: \"", len(lines), stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing (no frame, no agent)", stdout.String())
			}
			if ktest.WaitFor(50*time.Millisecond, func() bool { return fileExists(dir + "/agent-ran") }) {
				t.Errorf("the agent ran although the watcher refused")
			}
		})
	}
}

// TestWatcherOuterSIGKILL: when the watcher is not PID 1, the process the
// runtime started is the outer one; SIGKILL of it must take the box with
// it (the inner PID 1 must not outlive its parent).
func TestWatcherOuterSIGKILL(t *testing.T) {
	bin := watcherBin(t)
	for _, control := range []ktest.ControlMode{ktest.ControlFD, ktest.ControlStdin} {
		t.Run(control.String(), func(t *testing.T) {
			marker := newMarker(t)
			c := ktest.StartController(t, bin, ktest.Options{Control: control})
			c.Launch(shellSpec(treeScript, marker))
			if !c.WaitStdout("started", 5*time.Second) {
				t.Fatalf("the agent did not start\n%s", c.Diagnostics())
			}
			waitMarkers(t, c, 5*time.Second, marker, marker+"-setsid", marker+"-noterm")
			box := ktest.InNamespace(c.BoxNamespace(5 * time.Second))
			killed := time.Now()
			if err := c.Watcher.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			took := requireDead(t, box, killed, 5*time.Second, "after SIGKILL of the outer watcher")
			t.Logf("SIGKILL of the outer watcher → last of %d box processes dead after %s", len(box), took.Round(10*time.Microsecond))
		})
	}
	for _, user := range [][]string{nil, {"--user", "1000:1000"}} {
		t.Run("plain"+strings.Join(user, "-"), func(t *testing.T) {
			marker := newMarker(t)
			cmd := plainCmd(bin, false, user, bbox, "sh", "-c", treeScript, marker)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			t.Cleanup(func() { killTree(cmd.Process.Pid); <-done })
			marked := waitMarkers(t, nil, 5*time.Second, marker+"-setsid", marker+"-noterm")
			ns, err := ktest.PIDNamespace(marked[0].PID)
			if err != nil {
				t.Fatal(err)
			}
			box := ktest.InNamespace(ns)
			killed := time.Now()
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			took, alive := ktest.WaitDead(box, killed, 5*time.Second)
			if len(alive) > 0 {
				for _, p := range alive {
					_ = syscall.Kill(p.PID, syscall.SIGKILL)
				}
				t.Fatalf("after SIGKILL of the outer watcher: %d of %d processes still alive %s later: %s", len(alive), len(box), took.Round(time.Millisecond), ktest.Describe(alive))
			}
			t.Logf("SIGKILL of the outer watcher → last of %d box processes dead after %s", len(box), took.Round(10*time.Microsecond))
		})
	}
}

// TestWatcherCommandLine: --version, and usage errors exit 240 without
// starting anything.
func TestWatcherCommandLine(t *testing.T) {
	bin := watcherBin(t)
	code, out, err := ktest.ExitStatus(exec.Command(bin, "--version"), 5*time.Second)
	if err != nil || code != 0 || !strings.Contains(out, shared.Version) {
		t.Errorf("watcher --version: exit %d (%v), output %q; want 0 and %q", code, err, out, shared.Version)
	}
	for _, args := range [][]string{
		{},
		{"--no-such-flag", "--", "/bin/true"},
		{"--control=tcp:1"},
		{"--control=fd:x"},
		{"--deadline", "soon", "--", "/bin/true"},
		{"--grace=-1s", "--", "/bin/true"},
		{"--user", "nobody", "--", "/bin/true"},
		{"--control=stdin", "--", "/bin/true"},
	} {
		dir := readyDir(t)
		cmd := exec.Command(bin, args...)
		for i, a := range cmd.Args {
			if a == "/bin/true" {
				cmd.Args[i] = bbox
				cmd.Args = append(cmd.Args[:i+1], "touch", dir+"/ran")
				break
			}
		}
		code, out, err := ktest.ExitStatus(cmd, 5*time.Second)
		t.Logf("watcher %s: exit %d, %q", strings.Join(args, " "), code, out)
		if err != nil || code != shared.ExitUsage {
			t.Errorf("watcher %s: exit %d (%v), want %d (usage)", strings.Join(args, " "), code, err, shared.ExitUsage)
		}
		if fileExists(dir + "/ran") {
			t.Errorf("watcher %s started the command despite the usage error", strings.Join(args, " "))
		}
	}
}
