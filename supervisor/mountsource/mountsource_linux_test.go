package mountsource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// Check: a source through a link, or below a folder others
// may write to, is refused (243); a plain folder of ours passes.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	ours := filepath.Join(dir, "ours")
	os.Mkdir(ours, 0o755)
	os.Symlink("/", filepath.Join(dir, "rootlink"))
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o777) // a workspace a box may write to
	os.Mkdir(filepath.Join(open, "sub"), 0o755)
	for _, c := range []struct {
		source, refused string
	}{
		{ours, ""},
		{open, ""}, // its contents may be the box's; its own entry is not
		{filepath.Join(dir, "rootlink"), "passes through a symlink"},
		{filepath.Join(dir, "rootlink", "etc"), "passes through a symlink"},
		{filepath.Join(open, "sub"), "writable by group or others"},
		{"/", ""},
	} {
		err := Check([]supervisor.Mount{{Source: c.source, Target: "/x"}})
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", c.source, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused) || exitcode.Of(err, 0) != shared.ExitRefused):
			t.Errorf("%s: %v, want a refusal (%d) that says %q", c.source, err, shared.ExitRefused, c.refused)
		}
	}
}
