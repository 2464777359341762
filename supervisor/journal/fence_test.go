package journal_test

import (
	"strings"
	"testing"

	"deathwatch/supervisor/supervisortest"
)

// TestJournalFence: the journal imports neither the lifecycle nor
// anything above it (the lifecycle, reconcile, ls and demo import the
// journal), on every system the supervisor builds for.
func TestJournalFence(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for _, dep := range supervisortest.Deps(t, goos, "deathwatch/supervisor/journal") {
			if dep == "deathwatch/supervisor" || strings.HasPrefix(dep, "deathwatch/supervisor/runtime/") ||
				dep == "deathwatch/supervisor/reconcile" || dep == "deathwatch/supervisor/cli" || dep == "deathwatch/supervisor/hostcheck" {
				t.Errorf("GOOS=%s: the journal depends on %s", goos, dep)
			}
		}
	}
}
