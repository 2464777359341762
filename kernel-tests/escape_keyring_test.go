package kerneltests

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"golang.org/x/sys/unix"
)

// TestEscapeSessionKeyring: the controller's session keyring holds a
// secret; the agent tries to read it and to plant a key of its own back,
// with the filter (keyctl denied outright) and without it (a controller
// may send no filter; the fresh session keyring must hold alone).
//
// Session keyrings are per thread: the test locks its thread, gives it a
// keyring of its own with the secret in it, and starts the watcher from
// that thread, so the watcher inherits it as it would the supervisor's.
func TestEscapeSessionKeyring(t *testing.T) {
	bin := watcherBin(t)
	for _, filter := range []bool{true, false} {
		for _, d := range twoDomains {
			t.Run(d.name+"/filter="+strconv.FormatBool(filter), func(t *testing.T) {
				runtime.LockOSThread() // never unlocked: the thread goes with the test
				if _, err := unix.KeyctlJoinSessionKeyring("dw-ktest-" + newMarker(t)); err != nil {
					t.Fatalf("join a session keyring for the test: %v", err)
				}
				const secret = "HOST-SESSION-SECRET-42"
				serial, err := unix.AddKey("user", "dw-host-secret", []byte(secret), unix.KEY_SPEC_SESSION_KEYRING)
				if err != nil {
					t.Fatalf("add the host's key: %v", err)
				}
				// The agent is another uid: give "other" nothing, as a
				// real key would be; possession is what the attack needs.
				c := ktest.StartController(t, bin, d.options(false))
				spec := escapeSpec(t, `"$E" keys `+strconv.Itoa(serial), newMarker(t), false)
				if !filter {
					spec.Seccomp = nil
				}
				c.Launch(spec)
				res := c.Wait(20 * time.Second)
				got := keyValues(c.Stdout())
				t.Logf("agent: %v (exit %s)", got, fmtExit(res.Exit))
				if strings.Contains(c.Stdout(), secret) || got["read"] == "" || strings.HasPrefix(got["read"], "ok") {
					t.Errorf("the agent read the controller's key: read=%q", got["read"])
				}
				if filter && (got["read"] != "EPERM" || got["plant"] != "EPERM") {
					t.Errorf("read=%q plant=%q, want EPERM from the filter for both", got["read"], got["plant"])
				}
				if _, err := unix.KeyctlSearch(unix.KEY_SPEC_SESSION_KEYRING, "user", "dw-planted", 0); err == nil {
					t.Errorf("the agent planted a key in the controller's session keyring (plant=%q)", got["plant"])
				}
				// The controller still has its own key.
				buf := make([]byte, 64)
				if n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, serial, buf, 0); err != nil || string(buf[:n]) != secret {
					t.Errorf("the test's own key: %q, %v", buf[:max(n, 0)], err)
				}
			})
		}
	}
}
