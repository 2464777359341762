package ktest

import (
	"slices"
	"testing"
)

// TestSessionArgv: a user's command runs as it is by default, through
// systemd-run --user --scope (in place, the same pid) in a systemd
// session, and a session name this does not know runs a command that
// fails and says why.
func TestSessionArgv(t *testing.T) {
	cases := []struct {
		env  string
		want []string
	}{
		{"", []string{"/bin/sup", "exec"}},
		{"systemd", []string{"systemd-run", "--user", "--scope", "--quiet", "--", "/bin/sup", "exec"}},
		{"login", []string{"sh", "-c", `echo "$1" >&2; exit 2`, "sh", `kernel-tests: DEATHWATCH_USER_SESSION is "login"; want systemd or nothing`}},
	}
	for _, c := range cases {
		t.Setenv(EnvUserSession, c.env)
		if got := sessionArgv("/bin/sup", []string{"exec"}); !slices.Equal(got, c.want) {
			t.Errorf("%s=%q: %q, want %q", EnvUserSession, c.env, got, c.want)
		}
	}
}
