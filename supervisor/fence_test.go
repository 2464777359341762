package supervisor

import (
	"os"
	"os/exec"
	"strings"
	"testing"
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
		cmd := exec.Command("go", "list", "-deps", "deathwatch/supervisor")
		cmd.Env = append(os.Environ(), "GOOS="+goos)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("GOOS=%s go list -deps deathwatch/supervisor: %v\n%s", goos, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 5 {
			t.Fatalf("GOOS=%s: go list -deps printed only %d packages: %q", goos, len(deps), deps)
		}
		for _, dep := range deps {
			for _, f := range forbidden {
				if dep == strings.TrimSuffix(f, "/") || (strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f)) {
					t.Errorf("GOOS=%s: the lifecycle package depends on %s; a feature plugs in as a Party, a runtime by Register", goos, dep)
				}
			}
		}
	}
}
