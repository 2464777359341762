package defaultbounds

import (
	"reflect"
	"testing"
)

// doctor's bounds line: what a box gets, and what it does not and why.
func TestDescribe(t *testing.T) {
	fs := []string{"root read-only (--read-write-root)", "/tmp tmpfs 1024 MiB", "/dev/shm 256 MiB"}
	for _, tc := range []struct {
		pids, memory bool
		want         []string
	}{
		{true, true, append([]string{"pids 4096 (--pids-limit)", "memory 4096 MiB, no swap (--memory)"}, fs...)},
		{true, false, append([]string{"pids 4096 (--pids-limit)", "no memory bound: WHY; --pids-limit and --memory are refused"}, fs...)},
		{false, false, append([]string{"no pids or memory bound: WHY; --pids-limit and --memory are refused"}, fs...)},
	} {
		if got := Describe(tc.pids, tc.memory, "WHY"); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Describe(%v, %v) = %q, want %q", tc.pids, tc.memory, got, tc.want)
		}
	}
}
