package kerneltests

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// The watcher's kernel tests run the static watcher binary as PID 1
// (under `unshare --pid --fork --mount-proc`) and as an ordinary child of
// the test (where it must make its own PID namespace), driven by
// ktest.Controller as a stand-in for the supervisor. Agents are busybox
// shell scripts run as an unprivileged uid.

// bbox is busybox-static: world-executable, with every applet the agent
// scripts use.
const bbox = "/bin/busybox"

// agentPath is the PATH the agent scripts get.
const agentPath = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"

// watcherBin checks the prerequisites of the watcher tests (failing, not
// skipping, when one is missing) and returns the watcher binary.
func watcherBin(t *testing.T) string {
	t.Helper()
	ktest.RequireRoot(t)
	ktest.RequireCmd(t, "unshare")
	if st, err := os.Stat(bbox); err != nil || st.Mode()&0o001 == 0 {
		t.Fatalf("%s is missing or not world-executable (%v): install busybox-static (kernel-tests/provision.sh does)", bbox, err)
	}
	w := ktest.Build(t).Watcher
	if _, err := os.Stat(w); err != nil {
		t.Fatalf("the watcher binary was not built: %v", err)
	}
	return w
}

// domain is where the watcher runs: as PID 1 of a namespace made by
// unshare, or as a plain child that must make its own.
type domain struct {
	name    string
	pid1    bool
	control ktest.ControlMode
}

var (
	pid1FD      = domain{"pid1-fd", true, ktest.ControlFD}
	pid1Stdin   = domain{"pid1-stdin", true, ktest.ControlStdin}
	ownNSFD     = domain{"ownns-fd", false, ktest.ControlFD}
	ownNSStdin  = domain{"ownns-stdin", false, ktest.ControlStdin}
	twoDomains  = []domain{pid1FD, ownNSStdin}
	fourDomains = []domain{pid1FD, pid1Stdin, ownNSFD, ownNSStdin}
)

func (d domain) options(standin bool, flags ...string) ktest.Options {
	return ktest.Options{Control: d.control, PID1: d.pid1, Standin: standin, Flags: flags}
}

var markerClean = regexp.MustCompile(`[^A-Za-z0-9]+`)

// newMarker is a unique argument by which the test recognises its agent
// processes in /proc.
func newMarker(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := markerClean.ReplaceAllString(t.Name(), "-")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return "dwk-" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b[:])
}

// shellSpec runs script with busybox sh as uid:gid 1000:1000, $0 being
// the marker.
func shellSpec(script, marker string) shared.Spec {
	return shared.Spec{
		Argv:  []string{bbox, "sh", "-c", script, marker},
		Env:   []string{agentPath},
		UID:   shared.DefaultAgentUID,
		GID:   shared.DefaultAgentGID,
		Grace: time.Second,
	}
}

// plainCmd is the watcher in plain mode running argv, in domain d.
func plainCmd(bin string, pid1 bool, flags []string, argv ...string) *exec.Cmd {
	args := append(append(append([]string{}, flags...), "--"), argv...)
	full := ktest.WatcherArgv(bin, pid1, args...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env = ktest.WatcherEnv()
	return cmd
}

// waitMarkers waits until a process carries each of the markers and
// returns them all (leaving out the short-lived forks of those
// processes: see ktest.WithMarkerRoots).
func waitMarkers(t *testing.T, c *ktest.Controller, timeout time.Duration, markers ...string) []ktest.Proc {
	t.Helper()
	var all []ktest.Proc
	for _, m := range markers {
		var ps []ktest.Proc
		if !ktest.WaitFor(timeout, func() bool { ps = ktest.WithMarkerRoots(m); return len(ps) > 0 }) {
			if c != nil {
				t.Fatalf("no process with marker %s after %s\n%s", m, timeout, c.Diagnostics())
			}
			t.Fatalf("no process with marker %s after %s", m, timeout)
		}
		all = append(all, ps...)
	}
	return all
}

// uidOf is the real uid of a process (first field of Uid:).
func uidOf(p ktest.Proc) string {
	v, _ := ktest.StatusField(p.PID, "Uid")
	if f := strings.Fields(v); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// requireDead fails the test when a process of ps is still alive
// timeout after since, and returns when the last one died.
func requireDead(t *testing.T, ps []ktest.Proc, since time.Time, timeout time.Duration, what string) time.Duration {
	t.Helper()
	took, alive := ktest.WaitDead(ps, since, timeout)
	if len(alive) > 0 {
		t.Fatalf("%s: %d of %d processes still alive %s later: %s", what, len(alive), len(ps), took.Round(time.Millisecond), ktest.Describe(alive))
	}
	return took
}

// requireAlive fails the test when a process of ps is no longer alive.
func requireAlive(t *testing.T, ps []ktest.Proc, what string) {
	t.Helper()
	for _, p := range ps {
		if !ktest.Alive(p) {
			t.Fatalf("%s: process %d died too early", what, p.PID)
		}
	}
}

// expectExit checks the watcher's status and its exit record.
func expectExit(t *testing.T, c *ktest.Controller, res ktest.Result, code int, reason shared.Reason, recordRequired bool) {
	t.Helper()
	if res.Code != code {
		t.Errorf("watcher exit status %d (signal %v), want %d\n%s", res.Code, res.Signal, code, c.Diagnostics())
	}
	switch {
	case res.Exit != nil:
		if res.Exit.Reason != reason || res.Exit.Code != code {
			t.Errorf("exit record %+v, want reason %s code %d", *res.Exit, reason, code)
		}
	case res.ExitErr != nil:
		t.Errorf("exit record does not parse: %v", res.ExitErr)
	case recordRequired:
		t.Errorf("no exit record, want one with reason %s code %d\n%s", reason, code, c.Diagnostics())
	}
}

func fmtExit(x *shared.Exit) string {
	if x == nil {
		return "no exit record"
	}
	return fmt.Sprintf("exit{%s code=%d signal=%d runtime=%s sweep=%s %q}", x.Reason, x.Code, x.Signal, x.Runtime, x.Sweep, x.Message)
}

// touch creates an empty file: a go-ahead for an agent that polls for it.
func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// killTree SIGKILLs pid and everything below it (test cleanup).
func killTree(pid int) {
	for _, p := range ktest.Descendants(pid) {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
