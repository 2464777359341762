package kerneltests

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestEscapeCopyOutNamesModes (issue 29, weak spots): the agent names
// what it leaves for copy-out. A refused symlink's name carrying an OSC
// 52 sequence (a terminal's write to the clipboard) reached the
// controller's terminal raw in the supervisor's own line, and the files
// landed as the box made them, mode 0777: writable by every host user.
// Now the supervisor's lines carry no control character from the box
// (escaped as \x1b, \a), and what lands is the controller's, without
// group or world write.
func TestEscapeCopyOutNamesModes(t *testing.T) {
	forCopyRig(t, func(t *testing.T, r *rig) {
		out := r.mkdirOwned(t, "out")
		agent := `mkdir -p /tmp/res/d && echo data > /tmp/res/d/f && chmod 0777 /tmp/res/d /tmp/res/d/f && ` +
			`ln -s /etc/passwd "/tmp/res/$(printf 'x\033]52;c;cHduZWQ=\007y')"`
		res := runCmd(r.supervisor(nil, "--copy-out", "/tmp/res:"+out, "--", "sh", "-c", agent))
		t.Logf("exit %d\nstderr %q", res.code, res.stderr)
		if res.code != 0 {
			t.Fatalf("exit %d, stderr %q", res.code, res.stderr)
		}
		var refusal string
		for _, line := range strings.Split(res.stderr, "\n") {
			if strings.HasPrefix(line, "supervisor:") && strings.Contains(line, "leaves the exported tree") {
				refusal = line
			}
			if strings.HasPrefix(line, "supervisor:") && strings.ContainsAny(line, "\x1b\x07") {
				t.Errorf("a supervisor line carries the box's control characters: %q", line)
			}
		}
		if !strings.Contains(refusal, `x\x1b]52;c;cHduZWQ=\ay`) {
			t.Errorf("the refusal line %q does not name the link with its escapes shown", refusal)
		}
		for _, p := range []string{"res", "res/d", "res/d/f"} {
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(out, p), &st); err != nil {
				t.Errorf("%s did not land: %v", p, err)
				continue
			}
			if st.Mode&0o022 != 0 || int(st.Uid) != r.UID || int(st.Gid) != r.GID {
				t.Errorf("%s landed mode %#o, owner %d:%d; want no group or world write, owned by the controller (%d:%d)", p, st.Mode&0o7777, st.Uid, st.Gid, r.UID, r.GID)
			}
		}
		man, _ := os.ReadFile(filepath.Join(out, "res.manifest"))
		if strings.Contains(string(man), " 777 ") {
			t.Errorf("the manifest names mode 0777, not what landed:\n%s", man)
		}
	})
}
