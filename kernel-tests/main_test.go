package kerneltests

import (
	"fmt"
	"os"
	"testing"

	"deathwatch/kernel-tests/ktest"
)

// TestMain gives every process the tests start the default signal
// dispositions, whatever the suite was started under (nohup, GNU make,
// a CI runner): see ktest.DefaultIgnoredSignals.
func TestMain(m *testing.M) {
	if err := ktest.DefaultIgnoredSignals(); err != nil {
		fmt.Fprintf(os.Stderr, "kernel-tests: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
