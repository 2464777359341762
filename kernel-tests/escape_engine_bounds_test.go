package kerneltests

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor"
)

// TestEscapeEngineBounds (breach 5): Docker and rootless Podman boxes
// had no pids bound (4,300 processes in one box), the agent wrote 1.5 GiB
// into the engine's writable layer (the host's disk), and no box had a
// memory bound. Now, with no flag asking for any, a box's agent finds
// its root read-only, /tmp and /dev/shm bounded tmpfs it can write, a
// fork bomb stopped at the default pids bound and the default memory
// bound on its cgroup. Rootless Podman and rootless Docker on cgroup v1
// cannot enforce limits: doctor says so for them, and the fork bomb is
// not tried there.
func TestEscapeEngineBounds(t *testing.T) {
	esc := ktest.ToolPath(t, "escape")
	for _, proto := range rigs(t, "docker", "podman", "podman-rootless", "docker-rootless") {
		r := *proto
		t.Run(r.Name, func(t *testing.T) {
			r.setup(t)
			limits := !(r.User != "" && !cgroupUnified())
			script := `"$E" write /rootfile /tmp/ok /dev/shm/ok; "$E" statfs /tmp /dev/shm; echo memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null)`
			if limits {
				script += fmt.Sprintf(`; "$E" forks %d`, supervisor.DefaultPidsLimit+1000)
			}
			res := runCmd(r.supervisor([]string{"E=" + escapeDir + "/escape"}, "--mount", filepath.Dir(esc)+":"+escapeDir+":ro", "--env", "E",
				"--", "sh", "-c", script))
			t.Logf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
			if res.code != 0 {
				t.Fatalf("exit %d, stderr %s", res.code, res.stderr)
			}
			got := lines(res.stdout)
			if v := got["write:/rootfile"]; v != "EROFS" {
				t.Errorf("the agent writing to / with no --read-write-root: %q, want EROFS", v)
			}
			for _, p := range []string{"/tmp/ok", "/dev/shm/ok"} {
				if v := got["write:"+p]; v != "ok" {
					t.Errorf("the agent writing %s: %q, want ok", p, v)
				}
			}
			for _, c := range []struct {
				path  string
				bytes uint64
			}{{"/tmp", supervisor.TmpfsBytes}, {"/dev/shm", supervisor.ShmBytes}} {
				var size, inodes uint64
				if _, err := fmt.Sscanf(got["statfs:"+c.path], "%d/%d", &size, &inodes); err != nil {
					t.Fatalf("statfs %s: %q", c.path, got["statfs:"+c.path])
				}
				if size == 0 || size > c.bytes {
					t.Errorf("%s holds %d bytes; want at most %d", c.path, size, c.bytes)
				}
			}
			if !limits {
				doc := runCmd(r.Command(nil, r.Bin.Supervisor, "doctor", "--runtime", r.Runtime, "--skip-proof", "--posture", "preferred"))
				if want := "bounds " + r.Runtime + ":    no pids or memory bound: rootless " + r.Runtime + " on cgroup v1 cannot enforce limits"; !strings.Contains(doc.stdout, want) {
					t.Errorf("doctor as %s does not say that rootless %s's boxes have no pids or memory bound:\n%s%s", r.User, r.Runtime, doc.stdout, doc.stderr)
				}
				return
			}
			var n int
			var why string
			if _, err := fmt.Sscanf(strings.Replace(got["forks"], "/", " ", 1), "%d %s", &n, &why); err != nil {
				t.Fatalf("forks: %q", got["forks"])
			}
			if n >= supervisor.DefaultPidsLimit || why != "EAGAIN" {
				t.Errorf("a fork bomb in a box with no --pids-limit made %d processes (%s), want fewer than %d and EAGAIN", n, why, supervisor.DefaultPidsLimit)
			}
			if mem, _ := strconv.ParseInt(got["memory"], 10, 64); mem != supervisor.DefaultMemory {
				t.Errorf("the box's memory bound with no --memory: %q, want %d", got["memory"], int64(supervisor.DefaultMemory))
			}
			r.assertClean()
		})
	}
}

// cgroupUnified reports whether the host runs cgroup v2 only.
func cgroupUnified() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// TestEscapeUnprivilegedPids (breach 5): an unprivileged native box
// without a cgroup of its own had no pids bound (4,300 processes). Its
// agent's host id is the box's alone, so a per-uid process limit
// (RLIMIT_NPROC) is one per box: a fork bomb of bare forks stops below
// the default pids bound, with EAGAIN.
func TestEscapeUnprivilegedPids(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	requireUnprivilegedUserns(t)
	esc := ktest.ToolPath(t, "escape")
	cmd := ktest.AsUser(ktest.RootlessUser, bins.Supervisor, "exec", "--runtime", "native", "--journal", sharedTempDir(t),
		"--watcher", bins.Watcher, "--mount", filepath.Dir(esc)+":"+escapeDir+":ro",
		"--", escapeDir+"/escape", "forks", strconv.Itoa(supervisor.DefaultPidsLimit+1000))
	res := runCmd(cmd)
	t.Logf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
	var n int
	var why string
	if _, err := fmt.Sscanf(strings.Replace(lines(res.stdout)["forks"], "/", " ", 1), "%d %s", &n, &why); err != nil {
		t.Fatalf("forks: %q (exit %d, %s)", lines(res.stdout)["forks"], res.code, res.stderr)
	}
	if n >= supervisor.DefaultPidsLimit || why != "EAGAIN" {
		t.Errorf("a fork bomb in an unprivileged native box made %d processes (%s), want fewer than %d and EAGAIN", n, why, supervisor.DefaultPidsLimit)
	}
}
