// Package ktest holds what the kernel tests share: building the static
// binaries once, and requiring (never skipping on) root and commands.
package ktest

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Slack is what a kernel test allows on top of any time the product
// promises (a deadline, a grace, a heartbeat) or for anything that
// happens "at once" on an idle machine, before it calls the outcome a
// failure. Kernel tests assert containment and records; they must pass
// on a 2-core machine at load 8, where a timer or a kill can run
// hundreds of milliseconds late. Tight figures belong to make bench and
// to prove-deathwatch's own verdict.
const Slack = 5 * time.Second

// RepoRoot is the checkout's top folder.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// RequireRoot fails the test when not run as root: a kernel test that
// cannot run is a failure, not a skip.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("kernel-tests need root (euid is %d); run them through `make test` or .ci/run as root", os.Geteuid())
	}
}

// RequireCmd fails the test when a command is not on PATH and returns
// its path.
func RequireCmd(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed; run kernel-tests/provision.sh (make test does) to install the test prerequisites", name)
	}
	return p
}

// RootlessIDs are the uid and gid of RootlessUser, the unprivileged
// user provision.sh creates for rootless Podman.
func RootlessIDs(t testing.TB) (uid, gid int) {
	t.Helper()
	return UserIDs(t, RootlessUser)
}

// UserIDs are the uid and gid of a user provision.sh creates.
func UserIDs(t testing.TB, name string) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("look up %s: %v (run kernel-tests/provision.sh)", name, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// CommandAs runs name as user ("" for root) in a minimal environment
// (PATH, HOME, and for a user USER and its UserEnv) plus env, from
// /: what a controller running as that user would pass, and nothing of
// the test's own environment. A user's command runs in the user's
// session when EnvUserSession says so.
func CommandAs(username string, env []string, name string, args ...string) *exec.Cmd {
	base := []string{"PATH=" + os.Getenv("PATH")}
	if username == "" {
		cmd := exec.Command(name, args...)
		cmd.Env = append(append(base, "HOME=/root"), env...)
		return cmd
	}
	u, _ := user.Lookup(username)
	cmd := exec.Command("setpriv", append([]string{"--reuid", u.Uid, "--regid", u.Gid, "--init-groups", "--"}, sessionArgv(name, args)...)...)
	cmd.Env = append(append(append(base, "HOME="+u.HomeDir, "USER="+username), UserEnv(username)...), env...)
	cmd.Dir = "/"
	return cmd
}

// Binaries are the static binaries under test.
type Binaries struct {
	Dir        string
	Watcher    string
	Supervisor string
}

var (
	buildOnce sync.Once
	built     Binaries
	buildErr  error
)

// BuildGOEXPERIMENT is the GOEXPERIMENT both binaries are built with, as
// the Makefile's BUILD_GOEXPERIMENT (which says why): Go 1.26's only.
var BuildGOEXPERIMENT = func() string {
	if v := runtime.Version(); v == "go1.26" || strings.HasPrefix(v, "go1.26.") {
		return "nogreenteagc"
	}
	return ""
}()

// Build compiles both binaries the way the Makefile does (static,
// trimmed, no PIE) into a folder that lives as long as the test binary.
// With DEATHWATCH_BIN set it uses the binaries in that folder instead.
func Build(t testing.TB) Binaries {
	t.Helper()
	buildOnce.Do(func() {
		if dir := os.Getenv("DEATHWATCH_BIN"); dir != "" {
			built = Binaries{Dir: dir, Watcher: filepath.Join(dir, "watcher"), Supervisor: filepath.Join(dir, "supervisor")}
			return
		}
		dir, err := os.MkdirTemp("", "deathwatch-bin-")
		if err != nil {
			buildErr = err
			return
		}
		// World-readable so that an unprivileged agent or user can exec it.
		if err := os.Chmod(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		built = Binaries{Dir: dir, Watcher: filepath.Join(dir, "watcher"), Supervisor: filepath.Join(dir, "supervisor")}
		for _, b := range []struct{ out, pkg string }{{built.Watcher, "./cmd/watcher"}, {built.Supervisor, "./cmd/supervisor"}} {
			if _, err := os.Stat(filepath.Join(RepoRoot(), b.pkg)); err != nil {
				continue
			}
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -buildid=", "-o", b.out, b.pkg)
			cmd.Dir = RepoRoot()
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if BuildGOEXPERIMENT != "" {
				cmd.Env = append(cmd.Env, "GOEXPERIMENT="+BuildGOEXPERIMENT)
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = &buildError{pkg: b.pkg, out: string(out), err: err}
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatalf("build: %v", buildErr)
	}
	return built
}

type buildError struct {
	pkg, out string
	err      error
}

func (e *buildError) Error() string { return "go build " + e.pkg + ": " + e.err.Error() + "\n" + e.out }
