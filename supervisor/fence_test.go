package supervisor

import (
	"strings"
	"testing"

	"deathwatch/supervisor/supervisortest"
)

// TestCoreFence: the lifecycle package knows no feature and no runtime.
// Features ride on the control stream as parties (Party), runtimes
// register themselves (Register); neither is imported by the core, on
// any system the supervisor builds for.
func TestCoreFence(t *testing.T) {
	forbidden := []string{
		"deathwatch/supervisor/copy",
		"deathwatch/supervisor/runtime/", // every runtime
		"deathwatch/supervisor/cli",
		"deathwatch/supervisor/hostcheck",
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for _, dep := range supervisortest.Deps(t, goos, "deathwatch/supervisor") {
			for _, f := range forbidden {
				if dep == strings.TrimSuffix(f, "/") || (strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f)) {
					t.Errorf("GOOS=%s: the lifecycle package depends on %s; a feature plugs in as a Party, a runtime by Register", goos, dep)
				}
			}
		}
	}
}
