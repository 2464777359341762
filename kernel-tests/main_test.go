package kerneltests

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
)

// TestMain gives every process the tests start the default signal
// dispositions, whatever the suite was started under (nohup, GNU make,
// a CI runner): see ktest.DefaultIgnoredSignals. A suite that passed
// then fails if it left a box behind (a record, a cgroup, a container
// that was not there before it ran), once the engines had time to
// finish removals under way: a test that kills a supervisor reconciles
// after it, as a controller would.
func TestMain(m *testing.M) {
	if err := ktest.DefaultIgnoredSignals(); err != nil {
		fmt.Fprintf(os.Stderr, "kernel-tests: %v\n", err)
		os.Exit(1)
	}
	before := boxesOnHost()
	code := m.Run()
	if s := ktest.SchemaSummary(); s != "" {
		fmt.Fprintf(os.Stderr, "kernel-tests: outputs validated against docs/schemas: %s\n", s)
	}
	if code == 0 {
		var left []string
		if !ktest.WaitFor(3*ktest.Slack, func() bool { left = leftBehind(before); return len(left) == 0 }) {
			fmt.Fprintf(os.Stderr, "kernel-tests: FAIL: the tests left %d boxes behind (not there before the run, still there %v after it):\n  %s\n", len(left), 3*ktest.Slack, strings.Join(left, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}
