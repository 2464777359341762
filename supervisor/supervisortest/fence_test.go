package supervisortest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestProductFence: neither binary depends on this test-support package,
// on any system the supervisor builds for.
func TestProductFence(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		cmd := exec.Command("go", "list", "-deps", "deathwatch/cmd/supervisor", "deathwatch/cmd/watcher")
		cmd.Env = append(os.Environ(), "GOOS="+goos)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("GOOS=%s go list -deps the binaries: %v\n%s", goos, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 5 {
			t.Fatalf("GOOS=%s: go list -deps printed only %d packages: %q", goos, len(deps), deps)
		}
		for _, dep := range deps {
			if dep == "deathwatch/supervisor/supervisortest" {
				t.Errorf("GOOS=%s: a binary depends on %s, a package for tests only", goos, dep)
			}
		}
	}
}
