//go:build linux && !purego

package shared

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// The HWCAP probe agrees with golang.org/x/sys/cpu (which the watcher
// does not link): the SHA2 block runs exactly where the CPU has SHA2.
func TestSHA256ProbeMatchesXSysCPU(t *testing.T) {
	if hasSHA2() != cpu.ARM64.HasSHA2 || sha256HW != cpu.ARM64.HasSHA2 {
		t.Fatalf("HWCAP probe says %v (in use: %v); x/sys/cpu says %v", hasSHA2(), sha256HW, cpu.ARM64.HasSHA2)
	}
	t.Logf("SHA2 instructions: %v", sha256HW)
}
