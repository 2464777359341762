package watcher

import (
	"strings"
	"syscall"
	"testing"

	"deathwatch/shared"
)

// TestRestrictedRefusal: what restricted mode refuses, one line each,
// and what it runs.
func TestRestrictedRefusal(t *testing.T) {
	spec := &shared.Spec{UID: 1000, GID: 1000}
	for _, c := range []struct {
		name       string
		euid, egid int
		abi        int
		abiErr     error
		seccompErr error
		want       string // "" runs
	}{
		{"Linux 6.12, the agent's ids", 1000, 1000, 6, nil, nil, ""},
		{"ABI 7", 1000, 1000, 7, nil, nil, ""},
		{"root", 0, 0, 7, nil, nil, "the watcher runs as root"},
		{"another uid", 1001, 1000, 7, nil, nil, "agent ids 1000:1000 are not the watcher's 1001:1000"},
		{"another gid", 1000, 5, 7, nil, nil, "are not the watcher's 1000:5"},
		{"ABI 5", 1000, 1000, 5, nil, nil, "Landlock is ABI 5, without the signal scope (ABI 6, Linux 6.12)"},
		{"no Landlock", 1000, 1000, 0, syscall.EOPNOTSUPP, nil, "this kernel has no Landlock"},
		{"no seccomp filters", 1000, 1000, 6, nil, syscall.EINVAL, "cannot filter the agent's syscalls"},
	} {
		got := restrictedRefusal(c.euid, c.egid, spec, c.abi, c.abiErr, c.seccompErr)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if got != "" && (strings.Contains(got, "\n") || !strings.HasPrefix(got, "--restricted")) {
			t.Errorf("%s: %q is not one line naming --restricted", c.name, got)
		}
	}
}
