package kerneltests

import (
	"path/filepath"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
)

// TestEscapeCgroupLeave (the walls): the agent, with no capabilities and
// a cgroup namespace rooted at its cgroup, tries to leave the cgroup
// that bounds it and that the box's kill reaches: its pid into
// cgroup.procs (and v1's tasks) of the hierarchy's root, its parent's
// and the watcher's, through /sys/fs/cgroup and through fresh cgroup2
// and v1 mounts (as it is, and as root of new user and mount namespaces
// of its own), and a sibling folder made in each. Every attempt is
// refused and the agent ends in the cgroup it began in, on cgroup v1 and
// v2, for a root and for an unprivileged supervisor.
func TestEscapeCgroupLeave(t *testing.T) {
	for _, proto := range rigs(t, ktest.RigsOf(t, "native", "native-unprivileged")...) {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)
			esc := ktest.ToolPath(t, "escape")
			res := runCmd(r.supervisor(nil, "--mount", filepath.Dir(esc)+":"+escapeDir+":ro", "--", escapeDir+"/escape", "cgroup-leave"))
			t.Logf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
			if res.code != 0 {
				t.Fatalf("exit %d, want 0", res.code)
			}
			got := lines(res.stdout)
			before, after := got["cgroup-before"], got["cgroup-after"]
			if before == "" || after != before {
				t.Errorf("the agent's cgroups were %q before its attempts and %q after, want them unchanged", before, after)
			}
			var writes, mkdirs int
			for _, l := range strings.Split(res.stdout, "\n") {
				k, v, ok := strings.Cut(l, "=")
				if !ok || strings.HasPrefix(k, "cgroup-") || k == "unshare" || strings.Contains(k, "mount:") || strings.HasPrefix(k, "statfs:") {
					continue
				}
				switch {
				case strings.Contains(k, "procs:"):
					writes++
				case strings.Contains(k, "mkdir:"):
					mkdirs++
				}
				if v == "ok" {
					t.Errorf("%s=ok: the agent left its cgroup or made one", k)
				}
			}
			// The attempts through /sys/fs/cgroup and through a fresh
			// cgroup2 mount (as it is, and nested) all ran.
			if writes == 0 || mkdirs == 0 || got["mount:cgroup2"] == "" || got["unshare"] == "" {
				t.Errorf("the agent made %d writes to cgroup.procs and %d mkdirs, mount:cgroup2=%q, unshare=%q: it did not try every way out", writes, mkdirs, got["mount:cgroup2"], got["unshare"])
			}
			r.assertClean()
		})
	}
}
