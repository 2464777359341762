package kerneltests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/runtime/native"
)

// A --mount of a root supervisor's native box, played from inside the
// box as the agent: what it gets of a root-owned folder, of a folder of
// the account the operator names, and whether a set-id program it makes
// works anywhere.

// mountedOwner is a host uid:gid no account of the test machine has,
// the one the tests name with --mount-owner.
const mountedOwner = 4242

// hostMode is the mode and owner of a host file, "" when it is missing.
func hostMode(t *testing.T, p string) (os.FileMode, uint32, uint32, bool) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return 0, 0, 0, false
	}
	return os.FileMode(st.Mode & 0o7777), st.Uid, st.Gid, true
}

// TestEscapeMountRootOwner (issue 29, breach 1): the idmapped --mount
// mapped its folder's owner onto the agent, so a folder of root's made
// the agent root's owner on the host: through a read-write mount it
// left a set-uid root copy of a program (-rwsr-sr-x root:root), through
// a read-only one it read /etc/shadow and connected to a root-only
// socket. Now a read-write mount of root's folder is refused (243), and
// a read-only one shows root's files as nobody's, readable only where
// anyone may read.
func TestEscapeMountRootOwner(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})

	t.Run("read-write", func(t *testing.T) {
		dir := t.TempDir()
		os.Chmod(dir, 0o755)
		b := escapeBox(t, bins, supervisor.Mount{Source: dir, Target: "/tmp/w"})
		var out string
		err := boxSetupRun(t, rt, b, escapeAgent(`"$E" setid /tmp/w/rootshell; "$E" write /tmp/w/made`), &out)
		t.Logf("box: %v %q", err, out)
		if mode, uid, gid, ok := hostMode(t, filepath.Join(dir, "rootshell")); ok {
			t.Errorf("the agent left %s on the host: mode %#o, owner %d:%d", filepath.Join(dir, "rootshell"), mode, uid, gid)
		}
		if _, _, _, ok := hostMode(t, filepath.Join(dir, "made")); ok {
			t.Errorf("the agent wrote into root's folder through a read-write mount")
		}
		if code := exitcode.Of(err, 0); code != shared.ExitRefused || !strings.Contains(err.Error(), "read-only") {
			t.Errorf("a read-write --mount of root's folder: %v (exit %d), want a refusal (%d) that says to mount it read-only", err, code, shared.ExitRefused)
		}
	})

	t.Run("read-only", func(t *testing.T) {
		// Root's folder as the host has it: a 0600 secret, a root-only
		// socket, a file anyone may read.
		dir := t.TempDir()
		os.Chmod(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "shadow"), []byte("ROOT-SECRET"), 0o600)
		os.WriteFile(filepath.Join(dir, "motd"), []byte("PUBLIC"), 0o644)
		sock := filepath.Join(dir, "root.sock")
		listenUnix(t, sock)
		os.Chmod(sock, 0o600)
		b := escapeBox(t, bins, supervisor.Mount{Source: dir, Target: "/tmp/r", ReadOnly: true},
			supervisor.Mount{Source: "/etc", Target: "/tmp/etc", ReadOnly: true})
		r := runBox(t, rt, b, escapeAgent(`"$E" read /tmp/r/shadow /tmp/r/motd /tmp/etc/shadow; "$E" connect /tmp/r/root.sock; "$E" stat /tmp/r /tmp/r/shadow /tmp/etc/shadow; "$E" mountopts /tmp/r`), nil)
		got := lines(r.Stdout)
		t.Logf("exit %+v\n%s%s", r.Exit, r.Stdout, r.Stderr)
		for _, p := range []string{"/tmp/r/shadow", "/tmp/etc/shadow"} {
			if v := got["read:"+p]; v != "EACCES" {
				t.Errorf("the agent reading root's 0600 file %s through a read-only mount: %q, want EACCES", p, v)
			}
		}
		if v := got["connect:/tmp/r/root.sock"]; v != "EACCES" {
			t.Errorf("the agent connecting to a root-only socket through a read-only mount: %q, want EACCES", v)
		}
		if v := got["read:/tmp/r/motd"]; v != "ok:PUBLIC" {
			t.Errorf("the agent reading a file anyone may read: %q, want ok:PUBLIC", v)
		}
		for _, p := range []string{"/tmp/r", "/tmp/r/shadow", "/tmp/etc/shadow"} {
			if v := got["stat:"+p]; v != "65534:65534" {
				t.Errorf("root's %s shows as %q in the box, want 65534:65534 (nobody)", p, v)
			}
		}
		if !hasOpts(got["mountopts:/tmp/r"], "ro", "nosuid", "nodev") {
			t.Errorf("the read-only mount's options are %q, want ro,nosuid,nodev", got["mountopts:/tmp/r"])
		}
	})

	t.Run("cli", func(t *testing.T) {
		args := func(extra ...string) *exec.Cmd {
			a := append([]string{"exec", "--runtime", "native", "--journal", sharedTempDir(t), "--watcher", bins.Watcher}, extra...)
			return exec.Command(bins.Supervisor, append(a, "--", "/bin/true")...)
		}
		refusal(t, args("--mount", t.TempDir()+":/tmp/w"), shared.ExitRefused, "read-only")
		refusal(t, args("--mount-owner", "0:0", "--mount", t.TempDir()+":/tmp/w"), shared.ExitRefused, "root is never mapped")
	})
}

// hasOpts reports whether the comma-separated mount options opts hold
// every one of want.
func hasOpts(opts string, want ...string) bool {
	have := map[string]bool{}
	for _, o := range strings.Split(opts, ",") {
		have[o] = true
	}
	for _, w := range want {
		if !have[w] {
			return false
		}
	}
	return true
}

// TestEscapeMountNamedOwner: a folder of the account the operator names
// (--mount-owner) is the agent's: what it writes lands as that
// account's, never root's; root's file inside shows as nobody's and
// stays closed; the mount is nosuid, and a set-id program the agent
// makes there is on the host at most that account's.
func TestEscapeMountNamedOwner(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	if who, ok := hostAccounts(t)[mountedOwner]; ok {
		t.Fatalf("host id %d is an account here (%s); the test needs an id no account has", mountedOwner, who)
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chown(dir, mountedOwner, mountedOwner)
	os.WriteFile(filepath.Join(dir, "rootfile"), []byte("ROOT-SECRET"), 0o600)
	b := escapeBox(t, bins, supervisor.Mount{Source: dir, Target: "/tmp/w"})
	b.MountOwner = &supervisor.HostIDs{UID: mountedOwner, GID: mountedOwner}
	r := runBox(t, rt, b, escapeAgent(`"$E" write /tmp/w/made; "$E" setid /tmp/w/shell; "$E" stat /tmp/w /tmp/w/rootfile; "$E" read /tmp/w/rootfile; "$E" mountopts /tmp/w`), nil)
	got := lines(r.Stdout)
	t.Logf("exit %+v\n%s%s", r.Exit, r.Stdout, r.Stderr)
	if v := got["stat:/tmp/w"]; v != "1000:1000" {
		t.Errorf("the named account's folder shows as %q to the agent, want 1000:1000 (its own)", v)
	}
	if v := got["write:/tmp/w/made"]; v != "ok" {
		t.Errorf("the agent writing into the named account's folder: %q, want ok", v)
	}
	if _, uid, gid, ok := hostMode(t, filepath.Join(dir, "made")); !ok || uid != mountedOwner || gid != mountedOwner {
		t.Errorf("the agent's file on the host: present %v, owner %d:%d, want %d:%d (the named account)", ok, uid, gid, mountedOwner, mountedOwner)
	}
	if mode, uid, gid, ok := hostMode(t, filepath.Join(dir, "shell")); ok && (uid == 0 || gid == 0) {
		t.Errorf("the agent's program on the host is mode %#o, owner %d:%d: root's", mode, uid, gid)
	} else {
		t.Logf("the agent's set-id attempt (%s): on the host mode %#o, owner %d:%d", got["setid:/tmp/w/shell"], mode, uid, gid)
	}
	if v := got["stat:/tmp/w/rootfile"]; v != "65534:65534" {
		t.Errorf("root's file in the named account's folder shows as %q, want 65534:65534", v)
	}
	if v := got["read:/tmp/w/rootfile"]; v != "EACCES" {
		t.Errorf("the agent reading root's 0600 file in the named account's folder: %q, want EACCES", v)
	}
	if !hasOpts(got["mountopts:/tmp/w"], "rw", "nosuid", "nodev") {
		t.Errorf("the mount's options are %q, want rw,nosuid,nodev", got["mountopts:/tmp/w"])
	}

	// A read-write mount of a folder the named account does not own.
	other := t.TempDir()
	os.Chown(other, mountedOwner+1, mountedOwner+1)
	b2 := escapeBox(t, bins, supervisor.Mount{Source: other, Target: "/tmp/o"})
	b2.MountOwner = &supervisor.HostIDs{UID: mountedOwner, GID: mountedOwner}
	err := boxSetup(t, rt, b2, escapeAgent(`"$E" write /tmp/o/made`))
	if code := exitcode.Of(err, 0); code != shared.ExitRefused || !strings.Contains(err.Error(), "--mount-owner") {
		t.Errorf("a read-write --mount of another account's folder: %v (exit %d), want a refusal (%d) that names --mount-owner", err, code, shared.ExitRefused)
	}
}

// TestEscapeMountOptionsUnprivileged: the --mounts of an unprivileged
// supervisor's box are nosuid and nodev too.
func TestEscapeMountOptionsUnprivileged(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	requireUnprivilegedUserns(t)
	esc := ktest.ToolPath(t, "escape")
	w := sharedTempDir(t)
	args := []string{"exec", "--runtime", "native", "--journal", sharedTempDir(t), "--watcher", bins.Watcher,
		"--mount", filepath.Dir(esc) + ":" + escapeDir + ":ro", "--mount", w + ":/tmp/w",
		"--", escapeDir + "/escape", "mountopts", escapeDir, "/tmp/w"}
	out, err := ktest.AsUser(ktest.RootlessUser, bins.Supervisor, args...).CombinedOutput()
	t.Logf("as %s: %v\n%s", ktest.RootlessUser, err, out)
	got := lines(string(out))
	for _, p := range []string{escapeDir, "/tmp/w"} {
		if !hasOpts(got["mountopts:"+p], "nosuid", "nodev") {
			t.Errorf("the unprivileged box's mount %s has options %q, want nosuid,nodev", p, got["mountopts:"+p])
		}
	}
}
