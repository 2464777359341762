package journal

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestJournalFence: the journal imports neither the lifecycle nor
// anything above it (the lifecycle, reconcile, ls and demo import the
// journal), on every system the supervisor builds for.
func TestJournalFence(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		cmd := exec.Command("go", "list", "-deps", "deathwatch/supervisor/journal")
		cmd.Env = append(os.Environ(), "GOOS="+goos)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("GOOS=%s go list -deps deathwatch/supervisor/journal: %v\n%s", goos, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 5 {
			t.Fatalf("GOOS=%s: go list -deps printed only %d packages: %q", goos, len(deps), deps)
		}
		for _, dep := range deps {
			if dep == "deathwatch/supervisor" || strings.HasPrefix(dep, "deathwatch/supervisor/runtime/") ||
				dep == "deathwatch/supervisor/reconcile" || dep == "deathwatch/supervisor/cli" || dep == "deathwatch/supervisor/hostcheck" {
				t.Errorf("GOOS=%s: the journal depends on %s", goos, dep)
			}
		}
	}
}
