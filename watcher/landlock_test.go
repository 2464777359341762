package watcher

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

// TestLandlockLayers: which layers a kernel gives the agent, what is
// said, and when a box is refused.
func TestLandlockLayers(t *testing.T) {
	for _, c := range []struct {
		name             string
		abi              int
		err              error
		limited, require bool
		writes, scopes   bool
		warn, refusal    string // substrings; "" for none
	}{
		{"ABI 7, limited", 7, nil, true, false, true, true, "", ""},
		{"ABI 6, root writable", 6, nil, false, true, false, true, "", ""},
		{"ABI 4: writes, no scopes (doctor says)", 4, nil, true, false, true, false, "", ""},
		{"ABI 4 required", 4, nil, true, true, false, false, "", "without the agent's scopes (ABI 6"},
		{"ABI 2: no write limits, said", 2, nil, true, false, false, false, "not limited to the box's writable paths: this kernel's Landlock is ABI 2", ""},
		{"ABI 2, root writable: nothing to say", 2, nil, false, false, false, false, "", ""},
		{"no Landlock, said", 0, syscall.ENOSYS, true, false, false, false, "this kernel has no Landlock", ""},
		{"not enabled, required", 0, syscall.EOPNOTSUPP, true, true, false, false, "", "without the agent's write limits (ABI 3, Linux 6.2) and scopes"},
		{"a seccomp profile refuses it", 0, syscall.EPERM, false, false, false, false, "a seccomp profile around the box refuses Landlock", ""},
		{"a seccomp profile refuses it, required", 0, syscall.EPERM, false, true, false, false, "", "--require-landlock: a seccomp profile"},
	} {
		t.Run(c.name, func(t *testing.T) {
			writes, scopes, warn, err := landlockLayers(c.abi, c.err, c.limited, c.require)
			if writes != c.writes || scopes != c.scopes {
				t.Errorf("writes, scopes = %v, %v; want %v, %v", writes, scopes, c.writes, c.scopes)
			}
			if (c.warn == "") != (warn == "") || !strings.Contains(warn, c.warn) {
				t.Errorf("warning %q, want one with %q", warn, c.warn)
			}
			var refused *refusedError
			if c.refusal == "" && err != nil || c.refusal != "" && (!errors.As(err, &refused) || !strings.Contains(err.Error(), c.refusal)) {
				t.Errorf("refusal %v, want one with %q", err, c.refusal)
			}
		})
	}
}
