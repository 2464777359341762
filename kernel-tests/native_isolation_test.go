package kerneltests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/shared/seccomp"
	"deathwatch/supervisor"
	"deathwatch/supervisor/runtime/native"
)

// probeScript prints KEY=VALUE lines about what the agent sees. The test
// runs a host sleep the agent must not see.
const probeScript = `
echo pid=$$
echo ppid=$PPID
echo init=$(tr '\0' ' ' < /proc/1/cmdline)
echo procs=$(ls /proc | grep -c '^[0-9]')
echo hostsleep=$(cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^sleep$')
w=""; for p in / /etc /usr /root /var /home /dev /sys /proc/sys; do if (echo x > $p/.dwtest-w) 2>/dev/null; then w="$w $p"; fi; done; echo wrote=$w
(echo x > /tmp/ok) 2>/dev/null && echo tmp=ok
(echo 0 > /proc/sys/kernel/sysrq) 2>/dev/null && echo wrote-sysctl=yes
echo ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')
echo sysnet=$(ls /sys/class/net | tr '\n' ' ')
echo loflags=$(cat /sys/class/net/lo/flags)
echo hostname=$(hostname)
echo uid=$(id -u)
echo fds=$(ls /proc/self/fd | tr '\n' ' ')
(echo x > /tmp/w/from-box) 2>/dev/null && echo rwmount=ok
(echo x > /tmp/ro/from-box) 2>/dev/null && echo romount=written
cat /tmp/ro/hello
echo pwd=$(pwd)
echo cgroups=$(cut -d: -f3 /proc/self/cgroup | sort -u | tr '\n' ' ')
`

func TestNativeIsolation(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	host := exec.Command("sleep", "60")
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { host.Process.Kill(); host.Wait() }()

	rw, ro := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ro, "hello"), []byte("hello=from-host\n"), 0o644)
	// The read-write folder is the account's that --mount-owner names
	// (never root's: a root-owned folder is refused read-write).
	os.Chown(rw, mountedOwner, mountedOwner)
	b := newBox(t, bins)
	b.Mounts = []supervisor.Mount{{Source: rw, Target: "/tmp/w"}, {Source: ro, Target: "/tmp/ro", ReadOnly: true}}
	b.MountOwner = &supervisor.HostIDs{UID: mountedOwner, GID: mountedOwner}
	// The agent (1000) owns the read-write mount's files (idmapped from
	// the named owner); the read-only one is root's, its files shown as
	// nobody and readable where anyone may read. The root is nobody's
	// it knows.
	spec := agentSpec("/bin/sh", "-c", probeScript)
	b.Workdir, spec.Workdir = "/tmp/w", "/tmp/w"
	r := runBox(t, rt, b, spec, nil)
	t.Logf("start %v, ready %v, exit %v\n%s%s", r.Started, r.ReadyAt, r.Total, r.Stdout, r.Stderr)
	if r.Exit.Code != 0 {
		t.Fatalf("exit %+v, want 0", r.Exit)
	}
	got := lines(r.Stdout)
	want := map[string]string{
		"ppid": "1", "hostsleep": "0", "wrote": "", "wrote-sysctl": "", "tmp": "ok", "ifaces": "lo", "sysnet": "lo", "loflags": "0x9", "hostname": b.Name,
		// cgroups: the box's own namespace, the agent in the memory
		// cgroup's agent child below the watcher (the default bound).
		"uid": "1000", "rwmount": "ok", "hello": "from-host", "pwd": "/tmp/w", "cgroups": "/ /agent", "fds": "0 1 2 3", // ls's own directory is the 3
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		want["cgroups"] = "/agent" // pure v2: one hierarchy, the agent's own folder
	}
	for k, v := range want {
		if strings.TrimSpace(got[k]) != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if !strings.HasPrefix(got["init"], "watcher --control=fd:3") {
		t.Errorf("PID 1 of the box is %q, want the watcher", got["init"])
	}
	if got["romount"] != "" {
		t.Errorf("the agent wrote into a read-only mount")
	}
	if got["pid"] != "2" {
		// The watcher (a Go program) and the init stage before it use
		// pids for their threads; PID 2 needs the watcher to set
		// ns_last_pid or clone3 set_tid when it starts the agent.
		t.Logf("note: the agent is PID %s of the box, not 2", got["pid"])
	}
	if b, err := os.ReadFile(filepath.Join(rw, "from-box")); err != nil || string(b) != "x\n" {
		t.Errorf("write through the rw mount: %q, %v", b, err)
	}
	for _, p := range []string{"/.dwtest-w", "/etc/.dwtest-w", "/tmp/ok"} {
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Errorf("the box wrote %s on the host", p)
		}
	}
}

// The default agent (1000:1000) runs under the watcher, in the box's
// cgroup, and the box is gone after Remove.
func TestNativeAgentUnderWatcher(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	b := newBox(t, bins)
	var dirs []string
	var inCgroup []string
	r := runBox(t, rt, b, agentSpec("/bin/sh", "-c", "echo pid=$$ ppid=$PPID uid=$(id -u):$(id -g); sleep 0.2"), func(ready shared.Ready) {
		dirs = cgroupDirs(t, b)
		for _, d := range dirs {
			ps, err := cgroupProcs(d)
			if err != nil {
				t.Errorf("read %s: %v", d, err)
			}
			inCgroup = append(inCgroup, strings.Join(ps, ","))
		}
	})
	t.Logf("start %v, ready %v, exit %v: %s", r.Started, r.ReadyAt, r.Total, r.Stdout)
	if !strings.Contains(r.Stdout, "ppid=1 uid=1000:1000") || r.Exit.Code != 0 || r.Exit.Reason != shared.ReasonExited {
		t.Fatalf("stdout %q exit %+v; want the agent as 1000:1000 below PID 1, exit 0", r.Stdout, r.Exit)
	}
	for i, ps := range inCgroup {
		if n := len(strings.Split(ps, ",")); ps == "" || n < 2 {
			t.Errorf("cgroup %s held %q while the agent ran; want the watcher and the agent", dirs[i], ps)
		}
	}
	if err := rt.Remove(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s still exists after Remove (%v)", d, err)
		}
	}
	// Idempotent.
	if err := rt.Remove(t.Context(), b); err != nil {
		t.Errorf("second remove: %v", err)
	}
}

func TestNativeRootfs(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	b := newBox(t, bins)
	b.Image = ktest.BusyboxRootfs(t)
	script := `echo busybox=$(test -x /bin/busybox && echo yes); echo go=$(test -e /usr/local/go && echo visible); echo user=$(id -un); echo ppid=$PPID; (echo x > /etc/x) 2>/dev/null && echo wrote=etc; echo x > /tmp/x && echo tmp=ok`
	r := runBox(t, rt, b, agentSpec("/bin/sh", "-c", script), nil)
	t.Logf("start %v, ready %v, exit %v\n%s%s", r.Started, r.ReadyAt, r.Total, r.Stdout, r.Stderr)
	got := lines(r.Stdout)
	for k, v := range map[string]string{"busybox": "yes", "go": "", "ppid": "1", "wrote": "", "tmp": "ok"} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if r.Exit.Code != 0 {
		t.Fatalf("exit %+v", r.Exit)
	}
}

// Network host keeps the host's interfaces.
func TestNativeNetworkHost(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	// The box's network namespace is the host's own: the same namespace
	// (a host may have lo alone, which a fresh namespace has too).
	hostNS, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	b := newBox(t, bins)
	b.Network, b.AllowHostNetwork = "host", true
	r := runBox(t, rt, b, agentSpec("/bin/sh", "-c", "readlink /proc/self/ns/net; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '"), nil)
	ns, ifs, _ := strings.Cut(r.Stdout, "\n")
	if r.Exit.Code != 0 || ns != hostNS {
		t.Fatalf("network namespace %q exit %+v; want the host's, %s", ns, r.Exit, hostNS)
	}
	t.Logf("host network in the box: %s, interfaces %s", ns, ifs)
}

// The v2 code path on this machine's unified hierarchy (hybrid: no
// controllers are bound to it, so no limits; creation, membership,
// cgroup.kill and removal are real).
func TestNativeCgroupV2(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err != nil {
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
			t.Fatalf("no cgroup v2 hierarchy mounted: %v", err)
		}
	}
	root := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(root); err != nil {
		root = "/sys/fs/cgroup"
	}
	rt, bins := nativeRT(t, native.Options{CgroupVersion: 2, CgroupRoot: root})
	b := newBox(t, bins)
	// Under exec's default syscall filter, which the agent's fork
	// happens under too.
	spec := agentSpec("/bin/sh", "-c", "setsid sleep 100 & echo up; exec sleep 100")
	spec.Seccomp = seccomp.Default(false)
	st, rd := startBox(t, rt, b, spec)
	readUntil(t, rd, "up")
	dir := cgroupDirs(t, b)[0]
	ps, err := cgroupProcs(dir)
	if err != nil || len(ps) < 3 {
		t.Fatalf("cgroup v2 %s holds %v (%v); want the watcher, the agent and its child", dir, ps, err)
	}
	// The box's folder holds no process of its own: the watcher (the
	// init) is in watcher/, the agent and its child in agent/, which
	// the agent sees as its own cgroup namespace's /agent.
	own, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	w, _ := cgroupProcs(filepath.Join(dir, native.WatcherGroup))
	a, _ := cgroupProcs(filepath.Join(dir, native.AgentMemoryGroup))
	t.Logf("box %q, watcher/ %v, agent/ %v", strings.TrimSpace(string(own)), w, a)
	if strings.TrimSpace(string(own)) != "" || len(w) != 1 || w[0] != b.State[native.StateInitPID] || len(a) != 2 {
		t.Errorf("box %q, watcher/ %v, agent/ %v; want none, the init %s, and the agent and its child", own, w, a, b.State[native.StateInitPID])
	}
	start := time.Now()
	if err := rt.Remove(t.Context(), b); err != nil {
		t.Fatalf("remove: %v", err)
	}
	t.Logf("v2 remove (cgroup.kill + rmdir) of %d processes: %v", len(ps), time.Since(start))
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("cgroup %s still exists: %v", dir, err)
	}
	st.Control.Close()
	st.Wait()
}

// Launch timings of the runtime alone (no journal, no CLI), for the
// closing note.
func TestNativeLaunchTimings(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	var create, start, ready, exit, remove []time.Duration
	for i := 0; i < 15; i++ {
		b := newBox(t, bins)
		t0 := time.Now()
		if err := rt.Create(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		create = append(create, time.Since(t0))
		st, rd := startCreated(t, rt, b, agentSpec("/bin/true"))
		start = append(start, time.Since(t0))
		for {
			f, err := rd.Next()
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if f.Type == shared.FrameReady {
				ready = append(ready, time.Since(t0))
			}
			if f.Type == shared.FrameExit {
				exit = append(exit, time.Since(t0))
				break
			}
		}
		st.Control.Close()
		st.Wait()
		t1 := time.Now()
		if err := rt.Remove(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		remove = append(remove, time.Since(t1))
	}
	t.Logf("p50: create %v, started %v, ready %v, exit %v; remove %v", pct(create, .5), pct(start, .5), pct(ready, .5), pct(exit, .5), pct(remove, .5))
}

// Probe reports the runtime; List finds a box by its instance label
// (running while its cgroup holds processes) until Remove.
func TestNativeProbeAndList(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	info, err := rt.Probe(t.Context())
	if err != nil || !info.Present || info.Runtime != "native" || info.Rootless {
		t.Fatalf("probe as root: %+v, %v", info, err)
	}
	t.Logf("probe: %+v", info)
	b := newBox(t, bins)
	b.Labels[shared.LabelInstance] = "ktest-list-" + b.Name
	st, rd := startBox(t, rt, b, agentSpec("/bin/sh", "-c", "echo up; exec sleep 100"))
	readUntil(t, rd, "up")
	ls, err := rt.List(t.Context(), b.Labels[shared.LabelInstance])
	if err != nil || len(ls) != 1 || ls[0].Name != b.Name || !ls[0].Running || ls[0].Labels[shared.LabelManaged] != "true" {
		t.Fatalf("list while running: %+v, %v", ls, err)
	}
	if other, _ := rt.List(t.Context(), "another-instance"); len(other) != 0 {
		t.Errorf("another instance lists %+v", other)
	}
	if err := rt.Remove(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	st.Control.Close()
	st.Wait()
	if ls, err := rt.List(t.Context(), b.Labels[shared.LabelInstance]); err != nil || len(ls) != 0 {
		t.Fatalf("list after remove: %+v, %v", ls, err)
	}
}

// A rootfs without /sys still runs (the fresh sysfs is optional).
func TestNativeRootfsWithoutSys(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	src := ktest.BusyboxRootfs(t)
	root := t.TempDir()
	for _, d := range []string{"proc", "dev", "tmp"} {
		os.Mkdir(filepath.Join(root, d), 0o755)
	}
	os.Mkdir(filepath.Join(root, "bin"), 0o755)
	b := newBox(t, bins)
	b.Image = root
	b.Mounts = []supervisor.Mount{{Source: filepath.Join(src, "bin"), Target: "/bin", ReadOnly: true}}
	spec := agentSpec("/bin/sh", "-c", "test -e /sys && echo sys=yes || echo sys=no")
	spec.Env = []string{"PATH=/bin"}
	r := runBox(t, rt, b, spec, nil)
	if r.Exit.Code != 0 || lines(r.Stdout)["sys"] != "no" {
		t.Fatalf("exit %+v stdout %q stderr %q", r.Exit, r.Stdout, r.Stderr)
	}
}
