package supervisortest

import "testing"

// TestProductFence: neither binary depends on this test-support package,
// on any system the supervisor builds for.
func TestProductFence(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for _, dep := range Deps(t, goos, "deathwatch/cmd/supervisor", "deathwatch/cmd/watcher") {
			if dep == "deathwatch/supervisor/supervisortest" {
				t.Errorf("GOOS=%s: a binary depends on %s, a package for tests only", goos, dep)
			}
		}
	}
}
