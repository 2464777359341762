package kerneltests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared/landlock"
)

// requireWriteLimits fails the test on a kernel without Landlock's
// write limits.
func requireWriteLimits(t *testing.T) {
	t.Helper()
	requireLandlock(t, landlock.WriteABI, "write limits", "6.2")
}

// outsideWrites are places of a box the agent was never meant to write
// in, each made writable by some engine: the engines' mqueue file
// system (mode 1777: the agent made files there on Docker and Podman),
// Podman's own tmpfs at /run and /var/tmp under a read-only root (the
// agent wrote both, unbounded by our /tmp's size), and the root, /etc,
// /dev and the cgroup tree.
var outsideWrites = []string{"/dev/mqueue/dw-q", "/run/dw-f", "/var/tmp/dw-f", "/dw-f", "/etc/dw-f", "/dev/dw-f", "/sys/fs/cgroup/dw-f"}

// TestEscapeWriteLimits (issue 29, the walls): the agent, on every
// runtime, tries to leave a file wherever the box lets it. It may write
// in /tmp, /dev/shm and its read-write --mount, rename between folders
// there, and write to /dev/null; every other place refuses it, the
// ones an engine had left writable included.
func TestEscapeWriteLimits(t *testing.T) {
	requireWriteLimits(t)
	for _, proto := range rigs(t) {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)
			esc := ktest.ToolPath(t, "escape")
			work := r.mkdirOwned(t, "work")
			var owner []string
			if r.Name == "native" {
				// A root supervisor's native box takes a read-write
				// folder of the account --mount-owner names only.
				os.Chown(work, mountedOwner, mountedOwner)
				owner = []string{"--mount-owner", fmt.Sprintf("%d:%d", mountedOwner, mountedOwner)}
			}
			os.Chmod(work, 0o777)
			e := escapeDir + "/escape"
			script := "mkdir /tmp/a /tmp/b && " + e + " write /tmp/a/f && mv /tmp/a/f /tmp/b/f && echo rename=ok; " +
				e + " write /dev/shm/f /work/f; " + e + " create " + strings.Join(outsideWrites, " ") + "; " +
				"echo x > /dev/null && echo null=ok"
			args := append(owner, "--mount", filepath.Dir(esc)+":"+escapeDir+":ro", "--mount", work+":/work", "--", "sh", "-c", script)
			res := runCmd(r.supervisor(nil, args...))
			t.Logf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
			if res.code != 0 {
				t.Fatalf("exit %d, want 0", res.code)
			}
			got := lines(res.stdout)
			for _, k := range []string{"write:/tmp/a/f", "rename", "write:/dev/shm/f", "write:/work/f", "null"} {
				if got[k] != "ok" {
					t.Errorf("%s=%q inside the box's writable paths, want ok", k, got[k])
				}
			}
			for _, p := range outsideWrites {
				if v := got["create:"+p]; v == "ok" || v == "" {
					t.Errorf("the agent made %s (%q): a place of the box outside its writable paths", p, v)
				}
			}
			if _, err := os.Stat(filepath.Join(work, "f")); err != nil {
				t.Errorf("the agent's file in its --mount did not reach the host: %v", err)
			}
			r.assertClean()
		})
	}
}
