package kerneltests

import (
	"bufio"
	"context"
	"deathwatch/supervisor/journal"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/proc"
	"deathwatch/supervisor/runtime/native"
)

// The box's walls on the native runtime, played from inside the box as
// the agent (the escape program, mounted read-only at /tmp/dw-escape),
// with the host asserting what the attacker got.

const escapeDir = "/tmp/dw-escape"

// escapeMount is the escape program's folder as a read-only --mount.
func escapeMount(t *testing.T) supervisor.Mount {
	return supervisor.Mount{Source: filepath.Dir(ktest.ToolPath(t, "escape")), Target: escapeDir, ReadOnly: true}
}

// escapeBox is a native box that mounts the escape program.
func escapeBox(t *testing.T, bins ktest.Binaries, mounts ...supervisor.Mount) *supervisor.Box {
	b := newBox(t, bins)
	b.Mounts = append([]supervisor.Mount{escapeMount(t)}, mounts...)
	return b
}

// escapeAgent is the default agent (1000:1000) running script with $E
// the escape program.
func escapeAgent(script string, env ...string) shared.Spec {
	s := agentSpec("/bin/sh", "-c", script)
	s.Env = append(s.Env, "E="+escapeDir+"/escape")
	s.Env = append(s.Env, env...)
	return s
}

// hostAccounts are the uids and gids of /etc/passwd and /etc/group.
func hostAccounts(t *testing.T) map[int]string {
	t.Helper()
	ids := map[int]string{}
	for _, f := range []string{"/etc/passwd", "/etc/group"} {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		s := bufio.NewScanner(fh)
		for s.Scan() {
			p := strings.Split(s.Text(), ":")
			if len(p) > 2 {
				if id, err := strconv.Atoi(p[2]); err == nil {
					ids[id] = f + ":" + p[0]
				}
			}
		}
		fh.Close()
	}
	return ids
}

// hostIDsOf are the host uids and gids (real, effective, saved, fs) of
// pid.
func hostIDsOf(t *testing.T, pid int) []int {
	t.Helper()
	var ids []int
	for _, f := range []string{"Uid", "Gid"} {
		v, err := ktest.StatusField(pid, f)
		if err != nil {
			t.Fatalf("/proc/%d/status: %v", pid, err)
		}
		for _, s := range strings.Fields(v) {
			id, _ := strconv.Atoi(s)
			ids = append(ids, id)
		}
	}
	return ids
}

// boxProcs are the box's processes: its init and every descendant.
func boxProcs(t *testing.T, b *supervisor.Box) []int {
	t.Helper()
	pid, _ := strconv.Atoi(b.State[native.StateInitPID])
	if pid <= 0 {
		t.Fatalf("box %s has no init pid in its state %v", b.Name, b.State)
	}
	out := []int{pid}
	for _, p := range ktest.Descendants(pid) {
		out = append(out, p.PID)
	}
	return out
}

// TestEscapeHostIdentity (breach 1): the agent was host uid 1000, the
// machine's first login: that user could read the agent's secrets in
// /proc/PID/environ, and the agent could read that user's 0600 files.
// Now no process of a box has a host id of an account, and two boxes
// that run at once share no host id.
func TestEscapeHostIdentity(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	// The first login's private file, in a folder the controller mounts.
	data := t.TempDir()
	os.Chmod(data, 0o755)
	secretFile := filepath.Join(data, "login-secret")
	os.WriteFile(secretFile, []byte("LOGIN-SECRET"), 0o600)
	os.Chown(secretFile, shared.DefaultAgentUID, shared.DefaultAgentGID)
	const envSecret = "AGENT-ENV-SECRET-7"

	type running struct {
		b  *supervisor.Box
		st *supervisor.Started
	}
	var boxes []running
	for i := 0; i < 2; i++ {
		b := escapeBox(t, bins, supervisor.Mount{Source: data, Target: "/tmp/data", ReadOnly: true})
		spec := escapeAgent(`"$E" read /tmp/data/login-secret; echo up; exec sleep 60`, "DW_SECRET="+envSecret)
		st, rd := startBox(t, rt, b, spec)
		t.Cleanup(func() { st.Control.Close(); rt.Remove(context.Background(), b); st.Wait() })
		out := readUntil(t, rd, "up")
		if got := lines(out)["read:/tmp/data/login-secret"]; got != "EACCES" {
			t.Errorf("box %d: the agent reading the first login's 0600 file got %q, want EACCES", i, got)
		}
		boxes = append(boxes, running{b, st})
	}
	accounts := hostAccounts(t)
	seen := map[int]string{}
	for i, r := range boxes {
		procs := boxProcs(t, r.b)
		if len(procs) < 2 {
			t.Fatalf("box %d: processes %v, want the watcher and the agent", i, procs)
		}
		for _, pid := range procs {
			for _, id := range hostIDsOf(t, pid) {
				if who, ok := accounts[id]; ok {
					t.Errorf("box %d: pid %d (%s) runs as host id %d, an account (%s)", i, pid, strings.Join(ktest.Cmdline(pid), " "), id, who)
				}
				if id < native.IDRangeBase {
					t.Errorf("box %d: pid %d runs as host id %d, below the boxes' block %d", i, pid, id, native.IDRangeBase)
				}
				if other, ok := seen[id]; ok && other != r.b.Name {
					t.Errorf("host id %d is used by box %s and by box %s at once", id, other, r.b.Name)
				}
				seen[id] = r.b.Name
			}
		}
		// The first login (uid 1000 on the host) reads the agent's
		// environment: it is not that user's process any more.
		agent := procs[len(procs)-1]
		cmd := exec.Command("setpriv", "--reuid", "1000", "--regid", "1000", "--clear-groups", "cat", fmt.Sprintf("/proc/%d/environ", agent))
		out, err := cmd.CombinedOutput()
		if err == nil || strings.Contains(string(out), envSecret) {
			t.Errorf("box %d: host uid 1000 read the agent's environment (%v): %q", i, err, out)
		}
		t.Logf("box %d: host ids %v; uid 1000 reading its environ: %v", i, hostIDsOf(t, agent), strings.TrimSpace(string(out)))
	}
}

// hostSocket listens on a unix socket at p that anyone may connect to
// (accepting and closing), until the test ends.
func hostSocket(t *testing.T, p string) string {
	t.Helper()
	listenUnix(t, p)
	os.Chmod(p, 0o777)
	t.Cleanup(func() { os.Remove(p) })
	return p
}

// listenUnix listens on the unix socket address p (a path, or @name
// for an abstract one), accepting and closing, until the test ends.
func listenUnix(t *testing.T, p string) net.Listener {
	t.Helper()
	return listenOn(t, "unix", p)
}

// listenOn listens on address of network, accepting and closing every
// connection, until the test ends.
func listenOn(t *testing.T, network, address string) net.Listener {
	t.Helper()
	l, err := net.Listen(network, address)
	if err != nil {
		t.Fatalf("listen on %s: %v", address, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}

// TestEscapeHostSockets (breach 2): the read-only host root let the
// agent connect() to every socket under /run, /var/run, /tmp, /home,
// and with the docker group's gid it started a container that outlived
// the box. Now the box sees a minimal root and reaches no host socket,
// on network none and host.
func TestEscapeHostSockets(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	marker := newMarker(t)
	var socks []string
	real := map[string]bool{}
	for _, dir := range []string{"/run", "/var/run", "/tmp", "/var/tmp", "/home", "/root", "/srv", "/mnt", "/media"} {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			continue
		}
		if r, err := filepath.EvalSymlinks(dir); err != nil || real[r] {
			continue // /var/run is /run
		} else {
			real[r] = true
		}
		socks = append(socks, hostSocket(t, filepath.Join(dir, "dw-escape-"+marker+".sock")))
	}
	// The engines' sockets, where the host has them.
	for _, p := range []string{"/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock", "/run/dbus/system_bus_socket", "/run/systemd/private"} {
		if _, err := os.Stat(p); err == nil {
			socks = append(socks, p)
		}
	}
	dockerGID := -1
	if g, err := exec.Command("getent", "group", "docker").Output(); err == nil {
		if f := strings.Split(strings.TrimSpace(string(g)), ":"); len(f) > 2 {
			dockerGID, _ = strconv.Atoi(f[2])
		}
	}
	for _, network := range []string{"none", "host"} {
		t.Run("network="+network, func(t *testing.T) {
			b := escapeBox(t, bins)
			b.Network, b.AllowHostNetwork = network, network == "host"
			spec := escapeAgent(`"$E" connect "$@"; "$E" ls / /var /etc`)
			spec.Argv = append(spec.Argv, "sh")
			spec.Argv = append(spec.Argv, socks...)
			if dockerGID > 0 {
				spec.GID = uint32(dockerGID) // what --user 1000:<docker> asked for
			}
			r := runBox(t, rt, b, spec, nil)
			got := lines(r.Stdout)
			t.Logf("exit %+v\n%s%s", r.Exit, r.Stdout, r.Stderr)
			for _, p := range socks {
				if v := got["connect:"+p]; v == "ok" || v == "" {
					t.Errorf("the agent connected to the host socket %s (%q)", p, v)
				}
			}
			for _, hidden := range []string{"run", "home", "root", "srv", "mnt", "media", "boot"} {
				for _, e := range strings.Split(got["ls:/"], ",") {
					if e == hidden {
						t.Errorf("the box's / shows the host's /%s: %s", hidden, got["ls:/"])
					}
				}
			}
			if v := got["ls:/var"]; v != "" {
				t.Errorf("the box's /var shows %q, want nothing of the host's", v)
			}
			for _, e := range strings.Split(got["ls:/etc"], ",") {
				if e == "shadow" || e == "sudoers" || e == "ssh" {
					t.Errorf("the box's /etc holds the host's %s: %s", e, got["ls:/etc"])
				}
			}
		})
	}
}

// TestEscapeHostSocketsUnprivileged: the same attack in a box of an
// unprivileged supervisor (user namespace, no cgroup), through the CLI.
func TestEscapeHostSocketsUnprivileged(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	requireUnprivilegedUserns(t)
	marker := newMarker(t)
	var socks []string
	for _, dir := range []string{"/run", "/tmp", "/var/tmp", "/home"} {
		socks = append(socks, hostSocket(t, filepath.Join(dir, "dw-escape-u-"+marker+".sock")))
	}
	esc := ktest.ToolPath(t, "escape")
	args := []string{"exec", "--runtime", "native", "--journal", sharedTempDir(t), "--watcher", bins.Watcher,
		"--mount", filepath.Dir(esc) + ":" + escapeDir + ":ro", "--", escapeDir + "/escape", "connect"}
	out, err := ktest.AsUser(ktest.RootlessUser, bins.Supervisor, append(args, socks...)...).CombinedOutput()
	t.Logf("as %s: %v\n%s", ktest.RootlessUser, err, out)
	got := lines(string(out))
	for _, p := range socks {
		if v := got["connect:"+p]; v == "ok" || v == "" {
			t.Errorf("the agent of an unprivileged box connected to the host socket %s (%q)", p, v)
		}
	}
}

// TestEscapeSetupSymlinks (breach 4): setup resolved mount sources and
// targets as host root before pivot_root. A link one box leaves in its
// writable mount made the next box's setup create a folder at a host
// path of the agent's choosing (target side) or bind the host root
// (source side). Now both are refused, and nothing appears on the host.
func TestEscapeSetupSymlinks(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	marker := newMarker(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o777) // so that the attack runs on the old code too (the agent was host uid 1000)
	os.Chown(dir, mountedOwner, mountedOwner)
	hostTarget := "/etc/dw-escape-" + marker
	t.Cleanup(func() { os.RemoveAll(hostTarget) })

	// Box 1 plants the links in the folder the controller mounts.
	b1 := escapeBox(t, bins, supervisor.Mount{Source: dir, Target: "/tmp/w"})
	b1.MountOwner = &supervisor.HostIDs{UID: mountedOwner, GID: mountedOwner}
	r := runBox(t, rt, b1, escapeAgent(`ln -s `+hostTarget+` /tmp/w/sub && ln -s / /tmp/w/src && echo planted`), nil)
	if !strings.Contains(r.Stdout, "planted") {
		t.Fatalf("box 1 could not plant the links: %q %q %+v", r.Stdout, r.Stderr, r.Exit)
	}

	t.Run("target", func(t *testing.T) {
		other := t.TempDir()
		b2 := escapeBox(t, bins, supervisor.Mount{Source: dir, Target: "/tmp/w"}, supervisor.Mount{Source: other, Target: "/tmp/w/sub/x", ReadOnly: true})
		b2.MountOwner = b1.MountOwner
		err := boxSetup(t, rt, b2, escapeAgent(`echo ran`))
		t.Logf("box 2: %v", err)
		if _, serr := os.Lstat(hostTarget); serr == nil {
			t.Errorf("box 2's setup created %s on the host (through the link box 1 planted)", hostTarget)
		}
		if err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("box 2 with a mount through a planted link: %v, want a refusal that names the symlink", err)
		}
	})
	t.Run("source", func(t *testing.T) {
		b3 := escapeBox(t, bins, supervisor.Mount{Source: filepath.Join(dir, "src"), Target: "/tmp/h"})
		b3.MountOwner = b1.MountOwner
		var out string
		err := boxSetupRun(t, rt, b3, escapeAgent(`"$E" ls /tmp/h/etc /tmp/h/root`), &out)
		t.Logf("box 3: %v %q", err, out)
		if got := lines(out); got["ls:/tmp/h/etc"] != "" && !strings.HasPrefix(got["ls:/tmp/h/etc"], "E") {
			t.Errorf("the agent sees the host's /etc through a planted source link: %s", got["ls:/tmp/h/etc"])
		}
		if err == nil || !strings.Contains(err.Error(), "mount source") || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("box 3 with a symlinked mount source: %v, want a refusal that names the symlink", err)
		}
	})
}

// boxSetup creates and starts b and runs spec; it returns the Create or
// Start error (a refused setup), or nil once the box ran.
func boxSetup(t *testing.T, rt supervisor.Runtime, b *supervisor.Box, spec shared.Spec) error {
	var out string
	return boxSetupRun(t, rt, b, spec, &out)
}

func boxSetupRun(t *testing.T, rt supervisor.Runtime, b *supervisor.Box, spec shared.Spec, out *string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t.Cleanup(func() { rt.Remove(context.Background(), b) })
	if err := rt.Create(ctx, b); err != nil {
		return err
	}
	st, err := rt.Start(ctx, b)
	if err != nil {
		return err
	}
	defer func() { st.Control.Close(); st.Wait() }()
	w := shared.NewWriter(st.Control)
	w.Send(shared.FrameHello, shared.Hello{Version: shared.ProtocolVersion, Nonce: b.Nonce}.Marshal())
	w.Send(shared.FrameSpec, spec.Marshal())
	rd := shared.NewReader(st.Control)
	var sb strings.Builder
	for {
		f, err := rd.Next()
		if err != nil || f.Type == shared.FrameExit {
			*out = sb.String()
			return nil
		}
		if f.Type == shared.FrameStdout {
			sb.Write(f.Payload)
		}
	}
}

// TestEscapeJournalTrust (breach 5): a journal another user can write
// was trusted: a planted entry made reconcile SIGKILL an arbitrary
// process and empty an arbitrary host cgroup, and a FIFO named X.json
// hung reconcile forever. The attacker here is the unprivileged user
// (ktest.RootlessUser); the victim a host process of root's.
func TestEscapeJournalTrust(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	victim := exec.Command("sleep", "300")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	vst, err := proc.StartTime(victim.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(lookupUID(t, ktest.RootlessUser))
	// A victim cgroup (in each v1 controller a box uses): a host
	// process in a cgroup that is no box's.
	cgName := "not-a-box-" + newMarker(t)
	victimCg := filepath.Join("/sys/fs/cgroup/pids/deathwatch", cgName)
	cgVictim := exec.Command("sleep", "300")
	if err := cgVictim.Start(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"memory", "freezer", "pids"} {
		d := filepath.Join("/sys/fs/cgroup", c, "deathwatch", cgName)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(d) })
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cgVictim.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { cgVictim.Process.Kill(); cgVictim.Wait() })

	entry := func(launch string, state map[string]string) []byte {
		e := journal.Entry{
			LaunchID: launch, Instance: "ktest-trust", Box: "dw-" + launch, Runtime: "native", Nonce: "n",
			Labels: map[string]string{shared.LabelInstance: "ktest-trust"}, State: journal.StateStarted,
			Owner:        journal.Owner{PID: 999999, StartTime: 1, BootID: "not-this-boot"},
			RuntimeState: state, Created: time.Now(), Updated: time.Now(),
		}
		b, _ := json.Marshal(e)
		return b
	}
	plant := func(dir string) {
		os.WriteFile(filepath.Join(dir, "pidkill.json"), entry("pidkill", map[string]string{
			native.StateInitPID: strconv.Itoa(victim.Process.Pid), native.StateInitStart: strconv.FormatUint(vst, 10),
		}), 0o644)
		os.WriteFile(filepath.Join(dir, "cgkill.json"), entry("cgkill", map[string]string{
			native.StateCgroup: "/deathwatch/" + filepath.Base(victimCg), native.StateCgroupVersion: "1", native.StateCgroupRoot: "/sys/fs/cgroup",
		}), 0o644)
	}
	reconcile := func(t *testing.T, journal string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bins.Supervisor, "--instance", "ktest-trust", "--journal", journal, "reconcile", "--runtime", "native")
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("reconcile hung (killed after 60s): %s", out)
		}
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return code, string(out)
	}
	victimsAlive := func(t *testing.T) {
		t.Helper()
		if st, err := proc.ReadStat(victim.Process.Pid); err != nil || st.State == 'Z' {
			t.Errorf("reconcile killed the victim process %d named by a planted entry", victim.Process.Pid)
		}
		if b, _ := os.ReadFile(filepath.Join(victimCg, "cgroup.procs")); !strings.Contains(string(b), strconv.Itoa(cgVictim.Process.Pid)) {
			t.Errorf("reconcile emptied the host cgroup %s named by a planted entry", victimCg)
		}
	}

	t.Run("planted by another user", func(t *testing.T) {
		journal := sharedTempDir(t)
		// The attacker made the instance folder first (or it is group
		// writable): its entries are the attacker's.
		dir := filepath.Join(journal, "ktest-trust")
		os.Mkdir(dir, 0o777)
		os.Chmod(dir, 0o777)
		os.Chown(dir, uid, uid)
		plant(dir)
		code, out := reconcile(t, journal)
		t.Logf("reconcile: exit %d: %s", code, strings.TrimSpace(out))
		victimsAlive(t)
		if code == 0 || !strings.Contains(out, "not trusted") {
			t.Errorf("reconcile of a journal another user owns: exit %d %q, want a refusal that says it is not trusted", code, out)
		}
	})
	t.Run("own journal, foreign cgroup", func(t *testing.T) {
		// Even in the supervisor's own journal, a cgroup that is not the
		// box's own folder is never emptied.
		journal := t.TempDir()
		dir := filepath.Join(journal, "ktest-trust")
		os.Mkdir(dir, 0o700)
		os.WriteFile(filepath.Join(dir, "cgkill.json"), entry("cgkill", map[string]string{
			native.StateCgroup: "/deathwatch/" + filepath.Base(victimCg), native.StateCgroupVersion: "1", native.StateCgroupRoot: "/sys/fs/cgroup",
		}), 0o600)
		code, out := reconcile(t, journal)
		t.Logf("reconcile: exit %d: %s", code, strings.TrimSpace(out))
		victimsAlive(t)
		if code != shared.ExitBlocked {
			t.Errorf("exit %d, want %d (blocked)", code, shared.ExitBlocked)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		journal := t.TempDir()
		dir := filepath.Join(journal, "ktest-trust")
		os.Mkdir(dir, 0o700)
		if err := syscall.Mkfifo(filepath.Join(dir, "X.json"), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out := reconcile(t, journal)
		t.Logf("reconcile: exit %d: %s", code, strings.TrimSpace(out))
		if code != shared.ExitBlocked || !strings.Contains(out, "X.json") {
			t.Errorf("exit %d %q, want blocked on X.json", code, out)
		}
	})
	t.Run("no shared fallback", func(t *testing.T) {
		// No HOME, no XDG_*: the journal used to fall back to a shared
		// /tmp/deathwatch-UID that another user could make first.
		cmd := exec.Command("setpriv", "--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(uid), "--clear-groups",
			bins.Supervisor, "exec", "--runtime", "native", "--watcher", bins.Watcher, "--", "/bin/true")
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		refusal(t, cmd, shared.ExitUsage, "pass --journal")
	})
}

// TestEscapeDefaultBounds (weaker spots): /tmp and /dev/shm were
// unbounded tmpfs (half the host's memory each) and a box had no pids
// limit (3,000 processes started). Now both have a size and an inode
// count, and a box with no --pids-limit gets native.DefaultPidsLimit.
func TestEscapeDefaultBounds(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	b := escapeBox(t, bins)
	var pidsMax string
	r := runBox(t, rt, b, escapeAgent(`"$E" statfs /tmp /dev/shm`), func(shared.Ready) {
		pidsMax = readFileTrim(t, filepath.Join(pidsDir(t, b), "pids.max"))
	})
	got := lines(r.Stdout)
	t.Logf("%s pids.max=%s", strings.TrimSpace(r.Stdout), pidsMax)
	for _, c := range []struct {
		path          string
		bytes, inodes uint64
	}{{"/tmp", 1 << 30, 262144}, {"/dev/shm", 256 << 20, 16384}} {
		var size, inodes uint64
		if _, err := fmt.Sscanf(got["statfs:"+c.path], "%d/%d", &size, &inodes); err != nil {
			t.Fatalf("statfs %s: %q", c.path, got["statfs:"+c.path])
		}
		if size > c.bytes || inodes > c.inodes {
			t.Errorf("%s holds %d bytes and %d inodes; want at most %d and %d", c.path, size, inodes, c.bytes, c.inodes)
		}
	}
	if pidsMax != strconv.Itoa(native.DefaultPidsLimit) {
		t.Errorf("pids.max %q with no --pids-limit, want %d", pidsMax, native.DefaultPidsLimit)
	}
}

// TestNativeMountWithoutIdmap: a --mount of root's folder on a file
// system without idmapped mounts (sysfs) is bound as it is when
// read-only (its files show as nobody to the agent) and refused when
// read-write (243), since the agent could not write there.
func TestNativeMountWithoutIdmap(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	b := escapeBox(t, bins, supervisor.Mount{Source: "/sys/kernel/mm", Target: "/tmp/mm", ReadOnly: true})
	r := runBox(t, rt, b, escapeAgent(`stat -c owner=%u /tmp/mm; "$E" ls /tmp/mm`), nil)
	got := lines(r.Stdout)
	t.Logf("read-only: %s %s", strings.TrimSpace(r.Stdout), r.Stderr)
	if got["owner"] != "65534" || got["ls:/tmp/mm"] == "" || strings.HasPrefix(got["ls:/tmp/mm"], "E") {
		t.Errorf("read-only sysfs mount: owner %q, listing %q; want it bound as it is, owned by nobody", got["owner"], got["ls:/tmp/mm"])
	}
	b = escapeBox(t, bins, supervisor.Mount{Source: "/sys/kernel/mm", Target: "/tmp/mm"})
	err := boxSetup(t, rt, b, escapeAgent(`echo ran`))
	if exitcode.Of(err, 0) != shared.ExitRefused || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("read-write sysfs mount: %v, want a refusal (%d) that says to mount it read-only", err, shared.ExitRefused)
	}
	t.Logf("read-write: %v", err)
}
