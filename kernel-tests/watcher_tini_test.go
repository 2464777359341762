package kerneltests

import (
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// tiniBin is Debian's tini, static build preferred.
func tiniBin(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/tini-static", "/usr/bin/tini"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("tini is not installed (neither /usr/bin/tini-static nor /usr/bin/tini): install Debian's tini package (kernel-tests/provision.sh does)")
	return ""
}

// initCmd runs argv under init (tini or the watcher, plain mode) as PID 1
// of a new namespace, or directly (tini with -s, so it reaps; the watcher
// makes its own namespace).
func initCmd(init string, isTini, pid1 bool, argv ...string) *exec.Cmd {
	var args []string
	if isTini && !pid1 {
		args = append(args, "-s")
	}
	args = append(append(args, "--"), argv...)
	full := ktest.WatcherArgv(init, pid1, args...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env = ktest.WatcherEnv()
	return cmd
}

// TestWatcherPlainMatchesTini: the watcher in plain mode exits with the
// same status as tini on the same cases.
func TestWatcherPlainMatchesTini(t *testing.T) {
	bin := watcherBin(t)
	tini := tiniBin(t)
	dir := readyDir(t)
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		argv []string
		want int
	}{
		{"exit-0", []string{bbox, "sh", "-c", "exit 0"}, 0},
		{"exit-7", []string{bbox, "sh", "-c", "exit 7"}, 7},
		{"exit-125", []string{bbox, "sh", "-c", "exit 125"}, 125},
		{"self-SIGKILL", []string{bbox, "sh", "-c", "kill -KILL $$"}, 137},
		{"self-SIGTERM", []string{bbox, "sh", "-c", "kill -TERM $$"}, 143},
		{"self-SIGSEGV", []string{bbox, "sh", "-c", "kill -SEGV $$"}, 139},
		{"path-lookup", []string{"busybox", "sh", "-c", "exit 3"}, 3},
		{"not-found-absolute", []string{"/nonexistent/command"}, 127},
		{"not-found-on-path", []string{"no-such-command-deathwatch"}, 127},
		{"not-executable", []string{notExec}, 126},
		{"a-directory", []string{dir}, 126},
	}
	for _, pid1 := range []bool{true, false} {
		dname := "ownns"
		if pid1 {
			dname = "pid1"
		}
		for _, tc := range cases {
			t.Run(dname+"/"+tc.name, func(t *testing.T) {
				codes := [2]int{}
				for i, init := range []string{tini, bin} {
					code, out, err := ktest.ExitStatus(initCmd(init, i == 0, pid1, tc.argv...), 10*time.Second)
					if err != nil {
						t.Fatalf("%s: %v\n%s", init, err, out)
					}
					codes[i] = code
				}
				t.Logf("tini %d, watcher %d (expected %d)", codes[0], codes[1], tc.want)
				if codes[1] != codes[0] {
					t.Errorf("watcher exits %d, tini %d", codes[1], codes[0])
				}
				if codes[0] != tc.want {
					t.Logf("note: tini itself exits %d where %d was expected", codes[0], tc.want)
				}
			})
		}
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1} {
			t.Run(fmt.Sprintf("%s/forward-signal-%d", dname, int(sig)), func(t *testing.T) {
				codes := [2]int{}
				for i, init := range []string{tini, bin} {
					// A shell would wait for its foreground child before it
					// acts on SIGINT: the agent is sleep itself, its
					// (fractional, unique) duration the marker.
					marker := fmt.Sprintf("1000.%06d", mrand.IntN(1000000))
					codes[i] = forwardedStatus(t, initCmd(init, i == 0, pid1, bbox, "sleep", marker), pid1, sig, 100*time.Millisecond)
				}
				t.Logf("%v sent to the init: tini %d, watcher %d (expected %d)", sig, codes[0], codes[1], 128+int(sig))
				if codes[1] != codes[0] {
					t.Errorf("watcher exits %d, tini %d", codes[1], codes[0])
				}
			})
		}
	}
}

// TestWatcherEarlySignal: a SIGTERM sent to the init the moment the
// agent runs is forwarded like any other (tini blocks signals before it
// forks, so it never misses one): the status is 143 every time. The
// window is small, so a watcher that mishandles it fails here mostly
// under load; a correct one never does.
func TestWatcherEarlySignal(t *testing.T) {
	bin := watcherBin(t)
	tini := tiniBin(t)
	const runs = 20
	for _, pid1 := range []bool{true, false} {
		name := "ownns"
		if pid1 {
			name = "pid1"
		}
		t.Run(name, func(t *testing.T) {
			for i, init := range []string{tini, bin} {
				bad, n := map[int]int{}, 0
				for r := 0; r < runs; r++ {
					marker := fmt.Sprintf("1000.%06d", mrand.IntN(1000000))
					code := forwardedStatus(t, initCmd(init, i == 0, pid1, bbox, "sleep", marker), pid1, syscall.SIGTERM, 0)
					if code != 143 {
						bad[code]++
						n++
					}
				}
				t.Logf("%s: %d of %d early SIGTERMs gave another status than 143 (status: count %v)", filepath.Base(init), n, runs, bad)
				if len(bad) > 0 {
					t.Errorf("%s: a SIGTERM right after the agent started gave status:count %v instead of 143", filepath.Base(init), bad)
				}
			}
		})
	}
}

// forwardedStatus starts cmd (an init running `busybox sleep marker`),
// waits for the agent and then settle, sends sig to the init and returns the exit status. As
// PID 1 the init is the namespace's PID 1 (what `docker kill` signals);
// otherwise it is the process the test started.
func forwardedStatus(t *testing.T, cmd *exec.Cmd, pid1 bool, sig syscall.Signal, settle time.Duration) int {
	t.Helper()
	marker := cmd.Args[len(cmd.Args)-1]
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Args[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	var sh []ktest.Proc
	// The marker is in the init's argv too: the agent is the one that
	// runs busybox.
	findShell := func() bool {
		sh = nil
		for _, p := range ktest.WithMarker(marker) {
			if a := ktest.Cmdline(p.PID); len(a) > 1 && a[0] == bbox {
				sh = append(sh, p)
			}
		}
		return len(sh) == 1
	}
	if !ktest.WaitFor(10*time.Second, findShell) {
		t.Fatalf("%s: the agent did not start", cmd.Args[0])
	}
	time.Sleep(settle)
	target := cmd.Process.Pid
	if pid1 {
		st, err := ktest.ReadStat(sh[0].PID)
		if err != nil {
			t.Fatal(err)
		}
		target = st.PPID
	}
	if err := syscall.Kill(target, sig); err != nil {
		t.Fatalf("signal the init (pid %d): %v", target, err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit within 10s of %v\n%s", cmd.Args[0], sig, out.String())
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
