package watcher

import (
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"deathwatch/shared/landlock"
	"deathwatch/shared/seccomp"
	"golang.org/x/sys/unix"
)

// TestSpawnWalls: the keyring and the filter reach the child and only
// the child: the test process keeps no filter and its own session
// keyring. Needs no privilege (no_new_privs allows the filter).
func TestSpawnWalls(t *testing.T) {
	runtime.LockOSThread() // keyrings are per thread: ask the same one twice
	defer runtime.UnlockOSThread()
	before, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
	if err != nil {
		t.Skipf("no keyrings here (%v)", err)
	}
	prog, err := seccomp.Unmarshal(seccomp.Default(false))
	if err != nil {
		t.Fatal(err)
	}
	out := shOutput(t, "grep '^Seccomp:' /proc/self/status", &agent{NewKeyring: true, Filter: prog})
	if !strings.Contains(out, "Seccomp:\t2") {
		t.Errorf("child status: %q, want Seccomp: 2", out)
	}
	if s, _ := os.ReadFile("/proc/self/status"); !strings.Contains(string(s), "Seccomp:\t0") {
		t.Errorf("the test process got a filter too")
	}
	if after, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false); err != nil || after != before {
		t.Errorf("the test's session keyring changed: %d -> %d (%v)", before, after, err)
	}
}

// TestSpawnScoped: the agent's Landlock domain keeps out the process
// that spawned it (a signal to it is refused) and nothing else: the
// test process itself keeps signalling as before. Needs no privilege
// (no_new_privs allows the domain).
func TestSpawnScoped(t *testing.T) {
	if abi, err := landlock.ABI(); err != nil || abi < landlock.ScopeABI {
		t.Skipf("no Landlock scopes here (ABI %d, %v)", abi, err)
	}
	script := "kill -0 " + strconv.Itoa(os.Getpid()) + " 2>/dev/null && echo parent=ok || echo parent=refused; kill -0 $$ && echo self=ok"
	plan, _, err := planLandlock(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := shOutput(t, script, &agent{Landlock: plan}); got != "parent=refused\nself=ok\n" {
		t.Errorf("the scoped child said %q, want parent=refused and self=ok", got)
	}
	if err := syscall.Kill(os.Getpid(), 0); err != nil {
		t.Errorf("the test process lost its own signals: %v", err)
	}
}

// shOutput spawns a, with /bin/sh -c script as its command, and returns
// what it wrote to its stdout and stderr.
func shOutput(t *testing.T, script string, a *agent) string {
	t.Helper()
	sh := "/bin/sh"
	if _, err := os.Stat(sh); err != nil {
		t.Skip("no /bin/sh")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	a.Path, a.Argv, a.Files = sh, []string{sh, "-c", script}, []uintptr{0, w.Fd(), w.Fd()}
	pid, err := spawn(a)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	return string(out)
}

// TestSpawnWriteLimits: the agent writes in its writable paths (a
// folder's tree, a device file, its stdout through /proc) and nowhere
// else, while the test process keeps writing where it did. Needs no
// privilege.
func TestSpawnWriteLimits(t *testing.T) {
	if abi, err := landlock.ABI(); err != nil || abi < landlock.WriteABI {
		t.Skipf("no Landlock write limits here (ABI %d, %v)", abi, err)
	}
	allowed, other := t.TempDir(), t.TempDir()
	plan, warn, err := planLandlock([]string{allowed, "/dev/null", "/proc", allowed + "/missing"}, true)
	if err != nil || warn != "" {
		t.Fatalf("planLandlock: %v %q", err, warn)
	}
	script := `w() { (echo x > "$1") 2>/dev/null && echo "$1=ok" || echo "$1=refused"; }
mkdir -p ` + allowed + `/d/e && w ` + allowed + `/d/e/f; mv ` + allowed + `/d/e/f ` + allowed + `/g && echo mv=ok
w ` + other + `/f; w /dev/null; echo out > /dev/stdout
mkdir ` + other + `/d 2>/dev/null || echo mkdir=refused`
	got := shOutput(t, script, &agent{Landlock: plan})
	want := allowed + "/d/e/f=ok\nmv=ok\n" + other + "/f=refused\n/dev/null=ok\nout\nmkdir=refused\n"
	if got != want {
		t.Errorf("the limited child said\n%s\nwant\n%s", got, want)
	}
	if err := os.WriteFile(other+"/mine", nil, 0o600); err != nil {
		t.Errorf("the test process lost its own writes: %v", err)
	}
}
