package kerneltests

import (
	"os/exec"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
)

// TestReadmeMainCommand runs the README's first command (hostcheck.RunDemo) the way
// `make demo` does — the built supervisor, through its CLI — and checks
// what a reader is told to expect: the agent's output and exit code,
// the time the tree survived, and nothing left behind.
func TestReadmeMainCommand(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	cmd := exec.Command(bins.Supervisor, "demo")
	out, err := cmd.CombinedOutput()
	t.Logf("supervisor demo:\n%s", out)
	if err != nil {
		t.Fatalf("supervisor demo: %v", err)
	}
	for _, want := range []string{"exit code:  7", "SIGKILL controller -> agent tree dead after", "left: 0 processes, 0 cgroups, 0 open journal entries"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("supervisor demo output lacks %q", want)
		}
	}
}
