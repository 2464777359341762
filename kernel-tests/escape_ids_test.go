package kerneltests

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"deathwatch/supervisor"
	"deathwatch/supervisor/runtime/native"
)

// The box's ids on the native runtime, played from inside the box as
// the agent: what a --user other than the default gets through an
// idmapped --mount, and how a --image rootfs's owners show.

// TestEscapeIdmapAgentUser: the idmapped --mount mapped its owner onto
// the default agent (1000:1000) whatever --user asked, so an agent of
// another uid could not write to the folder the controller gave it.
// Now the owner (the account --mount-owner names) shows as the agent's
// own uid:gid, and what the agent writes lands on the host as the
// owner's.
func TestEscapeIdmapAgentUser(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	dir := t.TempDir()
	os.Chmod(dir, 0o755) // the named account's folder, closed to others for writing
	os.Chown(dir, mountedOwner, mountedOwner)
	b := escapeBox(t, bins, supervisor.Mount{Source: dir, Target: "/tmp/out"})
	b.MountOwner = &supervisor.HostIDs{UID: mountedOwner, GID: mountedOwner}
	const uid, gid = 2345, 3456
	b.AgentUID, b.AgentGID = uid, gid
	spec := escapeAgent(`"$E" stat /tmp/out; "$E" write /tmp/out/made; "$E" stat /tmp/out/made; id -u; id -g`)
	spec.UID, spec.GID = uid, gid
	r := runBox(t, rt, b, spec, nil)
	got := lines(r.Stdout)
	t.Logf("exit %+v\n%s%s", r.Exit, r.Stdout, r.Stderr)
	if want := "2345:3456"; got["stat:/tmp/out"] != want {
		t.Errorf("the mount's folder shows as %q to agent %d:%d, want %s (its own)", got["stat:/tmp/out"], uid, gid, want)
	}
	if got["write:/tmp/out/made"] != "ok" {
		t.Fatalf("agent %d:%d writing into its read-write mount: %q, want ok", uid, gid, got["write:/tmp/out/made"])
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "made"), &st); err != nil {
		t.Fatalf("the agent's file on the host: %v", err)
	}
	if st.Uid != mountedOwner || st.Gid != mountedOwner {
		t.Errorf("the agent's file is %d:%d on the host, want %d:%d (the mount's owner, the named account)", st.Uid, st.Gid, mountedOwner, mountedOwner)
	}
	t.Logf("on the host: %s owned by %d:%d", filepath.Join(dir, "made"), st.Uid, st.Gid)
}

// TestEscapeRootfsIdmap: a --image rootfs was bound as it is, so in the
// box's user namespace every file of an image unpacked by root showed
// as nobody, and a file the image gives the agent (0600, its uid) was
// closed to it. Now the rootfs is idmapped the way the box maps ids:
// root's files show as root's, the agent's as the agent's, and no
// set-uid program of the image works.
func TestEscapeRootfsIdmap(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	root := t.TempDir()
	os.Chmod(root, 0o755)
	for _, d := range []string{"proc", "dev", "tmp", "data"} {
		os.Mkdir(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "data", "rootfile"), []byte("root's"), 0o644)
	agentFile := filepath.Join(root, "data", "agentfile")
	os.WriteFile(agentFile, []byte("AGENT-OWN"), 0o600)
	os.Chown(agentFile, 1000, 1000)
	b := escapeBox(t, bins)
	b.Image = root
	spec := agentSpec(escapeDir+"/escape", "stat", "/", "/data/rootfile", "/data/agentfile")
	r := runBox(t, rt, b, spec, nil)
	spec2 := agentSpec(escapeDir+"/escape", "read", "/data/agentfile")
	b2 := escapeBox(t, bins)
	b2.Image = root
	r2 := runBox(t, rt, b2, spec2, nil)
	got := lines(r.Stdout + r2.Stdout)
	t.Logf("exit %+v %+v\n%s%s%s%s", r.Exit, r2.Exit, r.Stdout, r.Stderr, r2.Stdout, r2.Stderr)
	for p, want := range map[string]string{"/": "0:0", "/data/rootfile": "0:0", "/data/agentfile": "1000:1000"} {
		if got["stat:"+p] != want {
			t.Errorf("%s in the rootfs shows as %q in the box, want %s (as the image owns it)", p, got["stat:"+p], want)
		}
	}
	if v := got["read:/data/agentfile"]; !strings.HasPrefix(v, "ok:AGENT-OWN") {
		t.Errorf("the agent reading its own 0600 file of the image: %q, want ok", v)
	}
}
