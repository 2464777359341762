package supervisortest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Deps is what `go list -deps` prints for pkgs built for goos: every
// package they depend on, themselves included. It fails t when go list
// fails or prints too little to be a dependency closure.
func Deps(t testing.TB, goos string, pkgs ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "GOOS="+goos)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("GOOS=%s go list -deps %s: %v\n%s", goos, strings.Join(pkgs, " "), err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 5 {
		t.Fatalf("GOOS=%s: go list -deps printed only %d packages: %q", goos, len(deps), deps)
	}
	return deps
}
