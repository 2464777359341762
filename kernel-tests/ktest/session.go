package ktest

import (
	"fmt"
	"os"
)

// EnvUserSession names where a user's commands run. Unset, they run
// where the test runs (setpriv or runuser from the test's own cgroup);
// "systemd" runs each in the user's own service manager, as a program a
// logged-in user starts: systemd-run --user --scope execs it in place (the
// same pid, the test's child, its stdio) in a scope below the user's
// user@UID.service, the delegated subtree an unprivileged supervisor
// finds by itself. The VM rig sets it in its systemd guest.
const EnvUserSession = "DEATHWATCH_USER_SESSION"

// userSession is the argv that runs a command in the user's session
// (before the command's own), and what the session's client needs in the
// environment; nothing when the commands run where the test runs.
func userSession() ([]string, error) {
	switch v := os.Getenv(EnvUserSession); v {
	case "":
		return nil, nil
	case "systemd":
		return []string{"systemd-run", "--user", "--scope", "--quiet", "--"}, nil
	default:
		return nil, fmt.Errorf("%s is %q; want systemd or nothing", EnvUserSession, v)
	}
}

// sessionArgv is name args run in the user's session (userSession). A
// bad EnvUserSession runs a command that says so and fails: a test that
// cannot run as asked fails, it never runs elsewhere.
func sessionArgv(name string, args []string) []string {
	pre, err := userSession()
	if err != nil {
		return []string{"sh", "-c", `echo "$1" >&2; exit 2`, "sh", "kernel-tests: " + err.Error()}
	}
	return append(append(pre, name), args...)
}
