package ktest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Rig is one runtime as the kernel tests drive the built supervisor on
// it: the engine (or native), the user it runs as, the image, and a
// fresh instance and folder per test. The engine tests, the crash
// windows, doctor, prove-deathwatch and the benchmarks all use it.
type Rig struct {
	T        *testing.T
	Name     string // docker | podman | podman-rootless | docker-rootless | native | native-unprivileged
	Runtime  string // what --runtime takes: docker | podman | native
	User     string // "" = root
	UID, GID int
	Image    string // docker/podman: the test image
	Bin      Binaries
	Instance string
	Dir      string // journal and events, owned by User

	NativeState string // native: where the runtime keeps its records for User
}

// RigNames are every rig, in the order the tests run them.
var RigNames = []string{"docker", "podman", "podman-rootless", "docker-rootless", "native", "native-unprivileged"}

// Rigs returns the prototypes of the rigs named (every one the machine
// has when none is): the engines' images are built and loaded, the
// binaries built. Each test takes a copy and calls Setup.
func Rigs(t *testing.T, names ...string) []Rig {
	RequireRoot(t)
	have, err := MachineRigs(os.Getenv("DEATHWATCH_RIGS"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		names = have
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			t.Fatalf("this test needs the %s rig, which this machine does not have (DEATHWATCH_RIGS=%s)", n, os.Getenv("DEATHWATCH_RIGS"))
		}
	}
	bin := Build(t)
	var out []Rig
	for _, n := range names {
		r := Rig{Name: n, Runtime: n, Bin: bin}
		switch n {
		case "docker", "podman":
			r.Image = DockerImage(t, n)
		case "podman-rootless":
			r.Runtime, r.User = "podman", RootlessUser
			r.UID, r.GID = RootlessIDs(t)
			r.Image = PodmanRootlessImage(t, RootlessUser)
		case "docker-rootless":
			// Its own user and daemon (DOCKER_HOST in the user's env).
			r.Runtime, r.User = "docker", DockerRootlessUser
			r.UID, r.GID = UserIDs(t, DockerRootlessUser)
			r.Image = DockerRootlessImage(t)
		case "native":
			r.NativeState = "/run/deathwatch/native"
		case "native-unprivileged":
			// A user namespace, no cgroup of its own (the PID namespace
			// is the kill domain), records below XDG_RUNTIME_DIR.
			r.Runtime, r.User = "native", RootlessUser
			r.UID, r.GID = RootlessIDs(t)
			rd, err := RuntimeDir(RootlessUser)
			if err != nil {
				t.Fatalf("unprivileged native: %v", err)
			}
			r.NativeState = filepath.Join(rd, "deathwatch", "native")
		default:
			t.Fatalf("no rig %q (want one of %v)", n, RigNames)
		}
		out = append(out, r)
	}
	return out
}

// MachineRigs are the rigs a machine has: every one, or those a
// comma-separated DEATHWATCH_RIGS names (the VM rig's guests have the
// native runtime alone). A test that names a rig the machine lacks fails.
func MachineRigs(env string) ([]string, error) {
	if env == "" {
		return RigNames, nil
	}
	var out []string
	for _, n := range strings.Split(env, ",") {
		if !slices.Contains(RigNames, n) {
			return nil, fmt.Errorf("DEATHWATCH_RIGS names %q, not a rig (want some of %v)", n, RigNames)
		}
		out = append(out, n)
	}
	return out, nil
}

// RigsOf are those of names this machine has (MachineRigs), in the
// order given; a test that takes any of several rigs fails when none is
// there.
func RigsOf(t *testing.T, names ...string) []string {
	t.Helper()
	have, err := MachineRigs(os.Getenv("DEATHWATCH_RIGS"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if slices.Contains(have, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		t.Fatalf("this test needs one of the rigs %v, none of which this machine has (DEATHWATCH_RIGS=%s)", names, os.Getenv("DEATHWATCH_RIGS"))
	}
	return out
}

// Setup gives the rig its test, a fresh instance (PREFIX-PID-N) and a
// folder the rig's user owns, removed when the test ends.
func (r *Rig) Setup(t *testing.T, prefix string) {
	r.T = t
	r.Instance = fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e9)
	dir, err := os.MkdirTemp("", "dw-"+prefix+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if r.User != "" {
		if err := os.Chown(dir, r.UID, r.GID); err != nil {
			t.Fatal(err)
		}
	}
	r.Dir = dir
}

// JournalDir is the rig's journal.
func (r *Rig) JournalDir() string { return filepath.Join(r.Dir, "journal") }

// Command runs name as the rig's user with env added to a minimal environment.
func (r *Rig) Command(env []string, name string, args ...string) *exec.Cmd {
	return CommandAs(r.User, env, name, args...)
}

// Engine runs the engine CLI as the rig's user.
func (r *Rig) Engine(args ...string) *exec.Cmd { return r.Command(nil, r.Runtime, args...) }

// ExecArgs is `--instance I --journal J exec --runtime R [--image IMAGE]
// [--allow-rootful]` followed by extra: a rootful engine is accepted
// when the rig runs as root.
func (r *Rig) ExecArgs(instance string, extra ...string) []string {
	a := []string{"--instance", instance, "--journal", r.JournalDir(), "exec", "--runtime", r.Runtime}
	if r.Image != "" {
		a = append(a, "--image", r.Image)
	}
	if r.User == "" && r.Runtime != "native" {
		a = append(a, "--allow-rootful")
	}
	return append(a, extra...)
}
