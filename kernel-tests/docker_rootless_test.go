package kerneltests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
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
