package kerneltests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// refusal runs cmd and checks it exits with code and says one line that
// contains want, and nothing on stdout.
func refusal(t *testing.T, cmd *exec.Cmd, code int, want string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	got := -1
	if ee, ok := err.(*exec.ExitError); ok {
		got = ee.ExitCode()
	} else if err == nil {
		got = 0
	}
	msg := stderr.String()
	t.Logf("exit %d: %s", got, strings.TrimSpace(msg))
	if got != code {
		t.Errorf("exit %d (%v), want %d", got, err, code)
	}
	if strings.Count(msg, "\n") != 1 || !strings.HasSuffix(msg, "\n") {
		t.Errorf("stderr is not one line: %q", msg)
	}
	if !strings.Contains(msg, want) {
		t.Errorf("stderr %q does not say %q", msg, want)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
}

func TestNativeRefusals(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	execArgs := func(extra ...string) []string {
		a := append([]string{"exec", "--runtime", "native", "--journal", sharedTempDir(t), "--watcher", bins.Watcher}, extra...)
		return append(a, "--", "/bin/true")
	}
	noProc := t.TempDir()
	os.Mkdir(filepath.Join(noProc, "dev"), 0o755)
	tmpLink := t.TempDir()
	for _, d := range []string{"proc", "dev"} {
		os.Mkdir(filepath.Join(tmpLink, d), 0o755)
	}
	os.Symlink("/etc", filepath.Join(tmpLink, "tmp"))
	for _, c := range []struct {
		name, image, want string
	}{
		{"missing", "/nonexistent-rootfs", "bad rootfs /nonexistent-rootfs: no such file"},
		{"file", "/etc/passwd", "bad rootfs /etc/passwd: not a folder"},
		{"no-proc", noProc, "no /proc folder"},
		{"tmp-symlink", tmpLink, "no /tmp folder"},
	} {
		t.Run("rootfs-"+c.name, func(t *testing.T) {
			refusal(t, exec.Command(bins.Supervisor, execArgs("--image", c.image)...), shared.ExitImage, c.want)
		})
	}
	t.Run("mount-target-missing", func(t *testing.T) {
		// On the host root only what the minimal root shows of the host
		// must exist (elsewhere the mount point is made on its tmpfs).
		refusal(t, exec.Command(bins.Supervisor, execArgs("--mount", t.TempDir()+":/usr/no/such/dir")...), shared.ExitUsage, "does not exist in the box's read-only root")
	})
	t.Run("workdir-missing", func(t *testing.T) {
		refusal(t, exec.Command(bins.Supervisor, execArgs("--workdir", "/tmp/not-there")...), shared.ExitUsage, "workdir /tmp/not-there is below the box's fresh /tmp")
		refusal(t, exec.Command(bins.Supervisor, execArgs("--workdir", "/usr/no/such/dir")...), shared.ExitUsage, "workdir /usr/no/such/dir does not exist")
		refusal(t, exec.Command(bins.Supervisor, execArgs("--workdir", "/root")...), shared.ExitUsage, "workdir /root is not in the box's minimal root")
		rootfs := ktest.BusyboxRootfs(t)
		refusal(t, exec.Command(bins.Supervisor, execArgs("--image", rootfs, "--workdir", "/root")...), shared.ExitUsage, "is closed to others")
	})
	t.Run("mount-target-through-symlink", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink("/usr", filepath.Join(dir, "link")); err != nil {
			t.Fatal(err)
		}
		rootfs := t.TempDir()
		for _, d := range []string{"proc", "dev", "tmp"} {
			os.Mkdir(filepath.Join(rootfs, d), 0o755)
		}
		os.Symlink("/usr", filepath.Join(rootfs, "link"))
		refusal(t, exec.Command(bins.Supervisor, execArgs("--image", rootfs, "--mount", dir+":/link/x")...), shared.ExitUsage, "passes through the symlink /link -> /usr")
	})
	t.Run("cgroup-not-writable", func(t *testing.T) {
		requireUnprivilegedUserns(t)
		// Where the test runs: the user's own session has a delegated
		// subtree, where the limit holds.
		cmd := ktest.AsUserHere(ktest.RootlessUser, bins.Supervisor, execArgs("--memory", "64m")...)
		// On v2 the supervisor looks for a delegated subtree above its
		// own cgroup and says it found none; on v1 it cannot create the
		// box's folder.
		want := "cgroup not writable"
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
			want = "no delegated cgroup v2 for uid " + lookupUID(t, ktest.RootlessUser)
		}
		refusal(t, cmd, shared.ExitRefused, want)
	})
	t.Run("no-user-namespaces", func(t *testing.T) {
		// A user namespace of our own whose limit forbids further user
		// namespaces; the supervisor runs in it as an unprivileged uid.
		uid := lookupUID(t, ktest.RootlessUser)
		cmd := exec.Command("/bin/sh", "-c", `echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --reuid `+uid+` --regid `+uid+` --clear-groups "$@"`, "sh", bins.Supervisor)
		cmd.Args = append(cmd.Args, execArgs()...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp"}
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},

			GidMappingsEnableSetgroups: true,
		}
		refusal(t, cmd, shared.ExitRefused, "no permission for namespaces")
	})
}

func lookupUID(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ":")
		if len(f) > 2 && f[0] == name {
			if _, err := strconv.Atoi(f[2]); err == nil {
				return f[2]
			}
		}
	}
	t.Fatalf("user %s not found (kernel-tests/provision.sh creates it)", name)
	return ""
}
