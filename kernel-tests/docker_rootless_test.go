package kerneltests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor"
)

// A rootless Docker daemon lives in rootlesskit's mount namespace, with
// its own copy of /etc and /run made when it started. A --mount source
// made under /run since then does not exist for the daemon: the launch
// is refused (243) before anything is created, instead of an empty
// folder in the box and exit 0. A source the daemon does see (below
// /tmp) is bound with its content, and a missing source fails the
// launch instead of becoming an empty folder.
func TestDockerRootlessMountSources(t *testing.T) {
	r := *rigs(t, "docker-rootless")[0]
	r.Setup(t, "kt")
	t.Cleanup(func() { r.removeLeftovers() })

	late, err := os.MkdirTemp("/run", "dw-late-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(late) })
	seen := r.mkdirOwned(t, "seen")
	for _, d := range []string{late, seen} {
		if err := os.WriteFile(filepath.Join(d, "mark"), []byte("host file\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, r.UID, r.GID); err != nil {
			t.Fatal(err)
		}
	}
	res := runCmd(r.supervisor(nil, "--mount", late+":/m:ro", "--", "cat", "/m/mark"))
	t.Logf("source made under /run after the daemon started: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	if res.code != shared.ExitRefused || !strings.Contains(res.stderr, "does not see "+late) || strings.Contains(res.stdout, "host file") {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d and a line naming %s", res.code, res.stdout, res.stderr, shared.ExitRefused, late)
	}
	if len(r.entries(r.Instance)) != 0 {
		t.Errorf("a refused launch left journal entries: %+v", r.entries(r.Instance))
	}

	res = runCmd(r.supervisor(nil, "--mount", seen+":/m:ro", "--", "cat", "/m/mark"))
	if res.code != 0 || res.stdout != "host file\n" {
		t.Errorf("source below /tmp: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}

	missing := filepath.Join(r.Dir, "no-such-folder")
	res = runCmd(r.supervisor(nil, "--mount", missing+":/m", "--", "ls", "-a", "/m"))
	t.Logf("missing source: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	if res.code == 0 {
		t.Errorf("a missing --mount source ran the box: stdout %q", res.stdout)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("the missing source %s was created", missing)
	}
	r.assertClean()
}

// The rootless daemon's /info says it has no cgroups for its boxes
// (this host: cgroup v1, driver none): a limit is refused before
// anything is created, in the daemon's own words.
func TestDockerRootlessLimitsRefused(t *testing.T) {
	r := *rigs(t, "docker-rootless")[0]
	r.Setup(t, "kt")
	t.Cleanup(func() { r.removeLeftovers() })
	out, err := r.Engine("info", "--format", "{{.MemoryLimit}} {{.PidsLimit}} {{.CgroupDriver}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the daemon's /info: MemoryLimit PidsLimit CgroupDriver = %s", strings.TrimSpace(string(out)))
	enforces := strings.TrimSpace(string(out)) == "true true cgroupfs" || strings.TrimSpace(string(out)) == "true true systemd"
	for _, limit := range [][]string{{"--memory", "64m"}, {"--pids-limit", "40"}} {
		res := runCmd(r.supervisor(nil, append(limit, "--", "true")...))
		t.Logf("%v: exit %d %s", limit, res.code, res.stderr)
		switch {
		case enforces && res.code != 0:
			t.Errorf("%v on a daemon that enforces it: exit %d %s", limit, res.code, res.stderr)
		case !enforces && (res.code != shared.ExitRefused || !strings.Contains(res.stderr, "would not enforce "+limit[0]) || !strings.Contains(res.stderr, "/info")):
			t.Errorf("%v on a daemon without cgroups: exit %d %q, want %d naming the daemon's /info", limit, res.code, res.stderr, shared.ExitRefused)
		}
	}
	if len(r.entries(r.Instance)) != 0 {
		t.Errorf("a refused launch left journal entries: %+v", r.entries(r.Instance))
	}
	r.assertClean()
}

// The rootless Docker user without DOCKER_HOST: the rootful socket
// refuses it, and the one line says which variable to set, to what.
func TestDockerRootlessHostHint(t *testing.T) {
	r := *rigs(t, "docker-rootless")[0]
	r.Setup(t, "kt")
	sock, err := ktest.DockerRootlessSocket()
	if err != nil {
		t.Fatal(err)
	}
	res := runCmd(r.supervisor([]string{"DOCKER_HOST="}, "--", "true"))
	t.Logf("exit %d: %s", res.code, res.stderr)
	if res.code != shared.ExitEngine || !strings.Contains(res.stderr, "set DOCKER_HOST=unix://"+sock) {
		t.Errorf("exit %d, stderr %q: want %d and the hint to set DOCKER_HOST=unix://%s", res.code, res.stderr, shared.ExitEngine, sock)
	}
}

// The rootless daemon dies under a running box (SIGKILL of its dockerd):
// the supervisor owns the box's user namespace, so it ends the box
// itself at once — every box process is dead by the time it exits 245,
// instead of living until the heartbeat — and names the shim the dead
// daemon leaves. The daemon is started again and reconcile removes
// what is left.
func TestDockerRootlessDaemonDies(t *testing.T) {
	r := &rig{Rig: ktest.Rigs(t, "docker-rootless")[0]}
	r.setup(t)
	t.Cleanup(func() {
		// The daemon back (provision.sh guards this piece with a lock of
		// its own), then the box's remains are reconcile's.
		out, err := exec.Command("bash", filepath.Join(ktest.RepoRoot(), "kernel-tests", "provision.sh"), "--rootless-docker").CombinedOutput()
		if err != nil {
			t.Fatalf("restart the rootless daemon: %v\n%s", err, out)
		}
		if code, rep, stderr := r.reconcile(r.Instance); code != 0 {
			t.Errorf("reconcile after the daemon's restart: exit %d %+v\n%s", code, rep, stderr)
		}
	})
	run := r.start(r.Instance, nil, "--", "sh", "-c", cwAgent)
	if !run.waitFor(60*time.Second, func() bool { return strings.Contains(run.stdout(), "armed") }) {
		run.kill()
		t.Fatalf("the agent never armed:\n%s", run.stdout())
	}
	ev := run.event(supervisor.EventJournaled)
	procs := r.boxProcs(ev.Box, nil)
	if len(procs) < 4 {
		run.kill()
		t.Fatalf("box processes %s: want the watcher, the agent and its two descendants", ktest.Describe(procs))
	}
	out, err := exec.Command("pgrep", "-u", strconv.Itoa(r.UID), "-x", "dockerd").Output()
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		run.kill()
		t.Fatalf("no dockerd of %s (%v)", r.User, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	select {
	case <-run.done:
	case <-time.After(60 * time.Second):
		run.kill()
		t.Fatal("the supervisor did not exit within 60s of the daemon's death")
	}
	var alive []ktest.Proc
	for _, p := range procs {
		if p.Alive() {
			alive = append(alive, p)
		}
	}
	code := run.cmd.ProcessState.ExitCode()
	t.Logf("daemon SIGKILLed; the supervisor exited %d after %v:\n%s", code, time.Since(t0).Round(time.Millisecond), run.stdout())
	if len(alive) > 0 {
		t.Errorf("box processes alive when the supervisor exited: %s", ktest.Describe(alive))
	}
	if code != shared.ExitLivenessLost {
		t.Errorf("exit %d, want %d", code, shared.ExitLivenessLost)
	}
	if !strings.Contains(run.stdout(), "shim") || !strings.Contains(run.stdout(), "reconcile removes box "+ev.Box) {
		t.Errorf("the supervisor did not name the shim left for reconcile:\n%s", run.stdout())
	}
}

// An agent id the rootless daemon's user namespace does not map: one
// line naming the id and the ranges the box has, refused (243), instead
// of "start id: invalid argument".
func TestDockerRootlessAgentIDUnmapped(t *testing.T) {
	r := *rigs(t, "docker-rootless")[0]
	r.Setup(t, "kt")
	t.Cleanup(func() { r.removeLeftovers() })
	res := runCmd(r.supervisor(nil, "--user", "70000:70000", "--", "id"))
	t.Logf("exit %d: %s", res.code, res.stderr)
	if res.code != shared.ExitRefused || !strings.Contains(res.stderr, "agent id outside this box's user namespace: uid 70000") || res.stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d and the line naming uid 70000", res.code, res.stdout, res.stderr, shared.ExitRefused)
	}
	r.assertClean()
}
