package kerneltests

import (
	"path/filepath"
	"runtime"
	"testing"

	"deathwatch/kernel-tests/ktest"
)

// TestEscapeAllowlist: the filter is an allowlist on every runtime (the
// watcher installs it wherever it runs the agent). The agent, through
// plain `supervisor exec`, opens a vsock (on a VM host it reaches the
// hypervisor's services), makes calls Docker's profile does not name
// (file_getattr, move_pages), a number past every table, the NUMA
// policy calls, sets set-id bits on a file of its own by every chmod
// call and creates files with them (open, mknod, openat2): all refused,
// no file has the bits, while chmod 755, open with 0755 and the
// families a box uses work.
func TestEscapeAllowlist(t *testing.T) {
	for _, proto := range rigs(t) {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)
			esc := ktest.ToolPath(t, "escape")
			res := runCmd(r.supervisor(nil, "--mount", filepath.Dir(esc)+":"+escapeDir+":ro", "--", escapeDir+"/escape", "filter", "/tmp"))
			if res.code != 0 {
				t.Fatalf("exit %d, stdout %s, stderr %s", res.code, res.stdout, res.stderr)
			}
			got := lines(res.stdout)
			t.Logf("agent: %v", got)
			want := map[string]string{
				"socket-unix": "ok", "socket-inet": "ok", "socket-netlink": "ok",
				"socket-vsock": "EAFNOSUPPORT", "socket-alg": "EAFNOSUPPORT",
				"file_getattr": "ENOSYS", "move_pages": "ENOSYS", "nr-1000": "ENOSYS",
				"mbind": "EPERM", "set_mempolicy": "EPERM",
				"fchmodat-4755": "EPERM", "fchmodat-2755": "EPERM", "fchmod-6755": "EPERM",
				"fchmodat2-4755": "EPERM", "fchmodat2-2755-nofollow": "EPERM",
				"fchmodat-755": "ok", "mode": "0755",
				"open-4755": "EPERM", "mknod-2755": "EPERM", "openat2-4755": "ENOSYS", "open-755": "ok",
				"setid-files": "",
			}
			if runtime.GOARCH == "amd64" {
				want["chmod-4755"] = "EPERM" // chmod(2) itself; arm64 has only fchmodat
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s=%q, want %q", k, got[k], v)
				}
			}
			r.assertClean()
		})
	}
}
