//go:build linux && !purego

package shared

import (
	"os"
	"strings"
	"testing"
)

// The CPUID probe agrees with the kernel: the SHA block runs exactly
// where /proc/cpuinfo lists sha_ni, ssse3 and sse4_1.
func TestSHA256ProbeMatchesCPUInfo(t *testing.T) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	var flags map[string]bool
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = map[string]bool{}
			for _, f := range strings.Fields(v) {
				flags[f] = true
			}
			break
		}
	}
	if flags == nil {
		t.Fatal("/proc/cpuinfo has no flags line")
	}
	want := flags["sha_ni"] && flags["ssse3"] && flags["sse4_1"]
	if hasSHANI() != want || sha256HW != want {
		t.Fatalf("CPUID probe says %v (in use: %v); /proc/cpuinfo says sha_ni %v, ssse3 %v, sse4_1 %v",
			hasSHANI(), sha256HW, flags["sha_ni"], flags["ssse3"], flags["sse4_1"])
	}
	t.Logf("SHA instructions: %v", want)
}
