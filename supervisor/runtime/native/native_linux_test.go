package native

import (
	"deathwatch/supervisor"
	"deathwatch/supervisor/idslot"
	"os"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeHost is a host root for the planner: folders, files and links.
type fakeHost map[string]string // path → "dir" | "file" | "link:TEXT"

type fakeInfo struct {
	os.FileInfo
	mode os.FileMode
}

func (f fakeInfo) Mode() os.FileMode { return f.mode }
func (f fakeInfo) IsDir() bool       { return f.mode.IsDir() }

func (h fakeHost) Lstat(p string) (os.FileInfo, error) {
	switch v := h[p]; {
	case v == "dir":
		return fakeInfo{mode: os.ModeDir | 0o755}, nil
	case v == "file":
		return fakeInfo{mode: 0o644}, nil
	case strings.HasPrefix(v, "link:"):
		return fakeInfo{mode: os.ModeSymlink | 0o777}, nil
	}
	return nil, os.ErrNotExist
}

func (h fakeHost) Readlink(p string) (string, error) {
	if v, ok := strings.CutPrefix(h[p], "link:"); ok {
		return v, nil
	}
	return "", os.ErrInvalid
}

func withHost(t *testing.T, h hostView) {
	old := hostRoot
	hostRoot = h
	t.Cleanup(func() { hostRoot = old })
}

func TestNsinitPlan(t *testing.T) {
	withHost(t, fakeHost{"/usr": "dir", "/bin": "link:usr/bin", "/lib": "link:usr/lib", "/lib64": "dir",
		"/etc/passwd": "file", "/etc/resolv.conf": "link:../run/resolv.conf", "/etc/ssl": "dir", "/etc/shadow": "file", "/home": "dir"})
	b := &supervisor.Box{Name: "dw-1", Network: "none", Mounts: []supervisor.Mount{
		{Source: "/host/b", Target: "/work/b", ReadOnly: true},
		{Source: "/host/a", Target: "/work"},
	}}
	c, err := nsinitPlan(b, "/", "/opt/dw/watcher", false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Root != "" || c.Hostname != "dw-1" || !c.LoopbackUp || c.Reexec {
		t.Errorf("root %q host %q lo %v reexec %v", c.Root, c.Hostname, c.LoopbackUp, c.Reexec)
	}
	if c.Exec != boxWatcherPath || !reflect.DeepEqual(c.Argv, []string{"watcher", "--control=fd:3"}) {
		t.Errorf("exec %q %v", c.Exec, c.Argv)
	}
	if !reflect.DeepEqual(c.Env, []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GOMAXPROCS=1", "GODEBUG=profstackdepth=0"}) {
		t.Errorf("watcher env %q; want PATH and GOMAXPROCS only", c.Env)
	}
	// The order matters: /proc and /dev first, the watcher on /dev, /tmp,
	// the user's mounts shallow first, /dev read-only last.
	var steps []string
	for _, op := range c.Ops {
		s := op.Op + " " + op.Target
		if op.Op == "bind" {
			s += " <- " + op.Source
			if op.ReadOnly {
				s += " ro"
			}
		}
		steps = append(steps, s)
	}
	want := []string{
		// The minimal root: its own mount points, the host's trees read-only, links as links.
		"mkdir /proc", "mkdir /dev", "mkdir /sys", "mkdir /tmp", "mkdir /etc", "mkdir /var",
		"bind /usr <- /usr ro", "symlink /bin", "symlink /lib", "bind /lib64 <- /lib64 ro",
		"bind /etc/passwd <- /etc/passwd ro", "symlink /etc/resolv.conf", "bind /etc/ssl <- /etc/ssl ro",
		"mount /sys", "mount /proc", "rebind-ro /proc/sys", "rebind-ro /proc/sysrq-trigger", "mount /dev",
		"file /dev/null", "bind /dev/null <- /dev/null",
		"file /dev/zero", "bind /dev/zero <- /dev/zero",
		"file /dev/full", "bind /dev/full <- /dev/full",
		"file /dev/random", "bind /dev/random <- /dev/random",
		"file /dev/urandom", "bind /dev/urandom <- /dev/urandom",
		"file /dev/tty", "bind /dev/tty <- /dev/tty",
		"mkdir /dev/pts", "mount /dev/pts", "symlink /dev/ptmx", "mkdir /dev/shm", "mount /dev/shm",
		"symlink /dev/fd", "symlink /dev/stdin", "symlink /dev/stdout", "symlink /dev/stderr",
		"mkdir /dev/.deathwatch", "file /dev/.deathwatch/watcher", "bind /dev/.deathwatch/watcher <- /opt/dw/watcher ro",
		"mount /tmp",
		"bind /work <- /host/a", "bind /work/b <- /host/b ro",
		"readonly /dev", "readonly /",
	}
	if !reflect.DeepEqual(steps, want) {
		t.Errorf("steps:\n%s\nwant:\n%s", strings.Join(steps, "\n"), strings.Join(want, "\n"))
	}
	for _, op := range c.Ops {
		if op.Op == "mount" && op.Flags&unix.MS_NOSUID == 0 {
			t.Errorf("mount %s without nosuid", op.Target)
		}
		// Every bind but a device node's is nosuid and nodev.
		if op.Op == "bind" && !strings.HasPrefix(op.Source, "/dev/") && op.Flags&(unix.MS_NOSUID|unix.MS_NODEV) != unix.MS_NOSUID|unix.MS_NODEV {
			t.Errorf("bind %s <- %s without nosuid and nodev (flags %#x)", op.Target, op.Source, op.Flags)
		}
	}
}

func TestNsinitPlanRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		box  supervisor.Box
		root string
		want string
	}{
		{"bridge", supervisor.Box{Network: "bridge"}, "/", "none or host"},
		{"relative root", supervisor.Box{}, "rootfs", "not an absolute path"},
		{"relative source", supervisor.Box{Mounts: []supervisor.Mount{{Source: "a", Target: "/a"}}}, "/", "not an absolute path"},
		{"unclean target", supervisor.Box{Mounts: []supervisor.Mount{{Source: "/a", Target: "/a/../b"}}}, "/", "not a clean"},
		{"root target", supervisor.Box{Mounts: []supervisor.Mount{{Source: "/a", Target: "/"}}}, "/", "belongs to the box's own setup"},
		{"proc target", supervisor.Box{Mounts: []supervisor.Mount{{Source: "/a", Target: "/proc/x"}}}, "/", "belongs to the box's own setup"},
		{"dev target", supervisor.Box{Mounts: []supervisor.Mount{{Source: "/a", Target: "/dev"}}}, "/", "belongs to the box's own setup"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := nsinitPlan(&c.box, c.root, "/w", false)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

func TestNsinitPlanNetworkHost(t *testing.T) {
	c, err := nsinitPlan(&supervisor.Box{Name: strings.Repeat("x", 80), Network: "host"}, "/", "/w", true)
	if err != nil {
		t.Fatal(err)
	}
	if c.LoopbackUp || !c.Reexec || len(c.Hostname) != 63 {
		t.Errorf("lo %v reexec %v hostname %d bytes", c.LoopbackUp, c.Reexec, len(c.Hostname))
	}
	for _, op := range c.Ops {
		if op.Target == "/sys" && op.Op == "mount" {
			t.Errorf("network host mounts a fresh /sys (%+v); it keeps the host's, read-only", op)
		}
	}
}

func TestNativeCloneFlags(t *testing.T) {
	base := uintptr(unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	for _, c := range []struct {
		network string
		userns  bool
		want    uintptr
	}{
		{"none", false, base | unix.CLONE_NEWNET},
		{"", false, base | unix.CLONE_NEWNET},
		{"host", false, base},
		{"none", true, base | unix.CLONE_NEWNET | unix.CLONE_NEWUSER},
		{"host", true, base | unix.CLONE_NEWUSER},
	} {
		if got := nativeCloneFlags(c.network, c.userns); got != c.want {
			t.Errorf("nativeCloneFlags(%q, %v) = %#x, want %#x", c.network, c.userns, got, c.want)
		}
	}
}

// An unprivileged box's maps: the caller is the box's root, the agent
// and the watcher take the two host ids of the box's slot, in the
// subordinate uid and gid ranges.
func TestIDMapArgs(t *testing.T) {
	r := idslot.Sub(t.TempDir(), 100000, 300000, RootlessSlotIDs, 32768, "")
	uids, gids := rootlessMaps(r, 100006, 2345, 2346, 1000, 1001)
	for _, c := range []struct {
		got, want []string
	}{
		{idmapArgs("newuidmap", 42, uids), []string{"newuidmap", "42", "0", "2345", "1", "1000", "100006", "1", "65533", "100007", "1"}},
		{idmapArgs("newgidmap", 42, gids), []string{"newgidmap", "42", "0", "2346", "1", "1001", "300006", "1", "65533", "300007", "1"}},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("idmapArgs = %v, want %v", c.got, c.want)
		}
	}
}

func TestCgroupSpec(t *testing.T) {
	s, err := boxCgroupSpec(1, "/sys/fs/cgroup", "", "dw-1", 64<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	if s.Group != "/deathwatch/dw-1" {
		t.Errorf("group %q", s.Group)
	}
	st := s.state()
	back, ok, err := cgroupSpecFromState(st)
	if err != nil || !ok || back.Group != s.Group || back.Version != 1 || back.Root != s.Root {
		t.Errorf("state round trip: %+v %v %v (state %v)", back, ok, err, st)
	}
	m, box := "67108864", strconv.Itoa(64<<20+WatcherMemoryReserve)
	if got, want := s.limitsV1(true), map[string][]limitFile{
		"memory":         {{"memory.limit_in_bytes", box}, {"memory.memsw.limit_in_bytes", box}},
		AgentMemoryGroup: {{"memory.limit_in_bytes", m}, {"memory.memsw.limit_in_bytes", m}},
		"pids":           {{"pids.max", "100"}},
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("v1 limits %v, want %v", got, want)
	}
	if got := s.limitsV1(false)["memory"]; len(got) != 1 {
		t.Errorf("swap set without swap accounting: %v", got)
	}
	// v2: the box's folder holds the limit and the watcher's reserve,
	// the agent's the limit.
	files, agent, ctl := s.limitsV2()
	if want := []limitFile{{"memory.max", box}, {"memory.swap.max", "0"}, {"pids.max", "100"}}; !reflect.DeepEqual(files, want) || !reflect.DeepEqual(ctl, []string{"memory", "pids"}) {
		t.Errorf("v2 limits %v %v", files, ctl)
	}
	if want := []limitFile{{"memory.max", m}, {"memory.swap.max", "0"}}; !reflect.DeepEqual(agent, want) {
		t.Errorf("v2 agent limits %v, want %v", agent, want)
	}
	if files, agent, ctl := (cgroupSpec{}).limitsV2(); len(files)+len(agent)+len(ctl) != 0 {
		t.Errorf("no limits: files %v, agent %v, controllers %v", files, agent, ctl)
	}
	for _, bad := range []struct{ parent, name string }{{"rel", "x"}, {"/a/../b", "x"}, {"", "a/b"}, {"", ".."}, {"", ""}} {
		if _, err := boxCgroupSpec(2, "/sys/fs/cgroup", bad.parent, bad.name, 0, 0); err == nil {
			t.Errorf("boxCgroupSpec(%q, %q) accepted", bad.parent, bad.name)
		}
	}
}

func TestCgroupSpecFromState(t *testing.T) {
	if _, ok, err := cgroupSpecFromState(map[string]string{}); ok || err != nil {
		t.Errorf("empty state: %v %v", ok, err)
	}
	for _, st := range []map[string]string{
		{StateCgroup: "/deathwatch/x", StateCgroupVersion: "3"},
		{StateCgroup: "deathwatch/x", StateCgroupVersion: "1"},
		{StateCgroup: "/", StateCgroupVersion: "2"},
		{StateCgroup: "/a/../..", StateCgroupVersion: "2"},
	} {
		if _, _, err := cgroupSpecFromState(st); err == nil {
			t.Errorf("state %v accepted", st)
		}
	}
}

// TestNativeIsVolatile: nothing of a native box outlives the host's
// power, so its journal intent skips the folder fsync (Journal.Put).
// Its on-disk state must then be where boot clears it.
func TestNativeIsVolatile(t *testing.T) {
	d, ok := supervisor.Lookup("native")
	if !ok || d.Has(supervisor.CapVolatile) != volatileStateDir(defaultNativeStateDir(), os.Getenv("XDG_RUNTIME_DIR")) || (os.Geteuid() == 0 && !d.Has(supervisor.CapVolatile)) {
		t.Fatalf("native descriptor %+v: want Volatile as root", d)
	}
	for _, tc := range []struct {
		dir, xdg string
		want     bool
	}{
		{"/run/deathwatch/native", "", true},
		{"/run/user/1000/deathwatch/native", "/run/user/1000", true},
		{"/home/u/.local/state/deathwatch/native", "", false},
		{"/home/u/.local/state/deathwatch/native", "/run/user/1000", false},
		{"/x/rt/deathwatch/native", "/x/rt", true},
		{"/x/rtx/native", "/x/rt", false},
		{"/run2/native", "", false},
		{"", "", true},
	} {
		if got := volatileStateDir(tc.dir, tc.xdg); got != tc.want {
			t.Errorf("volatileStateDir(%q, %q) = %v, want %v", tc.dir, tc.xdg, got, tc.want)
		}
	}
	for _, dir := range []string{DefaultIDRangeDir, New(nil, Options{}).opts.StateDir} {
		if os.Geteuid() == 0 && !strings.HasPrefix(dir, "/run/") {
			t.Errorf("%s is not below /run: a Volatile runtime's state must not outlive a reboot", dir)
		}
	}
}

// TestInitCmd: the init stage runs the watcher in its init mode with
// the control, settings and free descriptors first; a root supervisor's
// stage maps the box's host range and starts as the box's root, from
// the watcher's detached tree when it has one; the cgroup settings
// follow the prep.
func TestInitCmd(t *testing.T) {
	open := func() *os.File {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	ctl, set, devnull, extra := open(), open(), open(), open()
	b := &supervisor.Box{WatcherPath: "/usr/local/bin/watcher", Network: "none"}
	cfg := nsinitConfig{Argv: []string{"watcher", "--control=fd:3"}, Env: []string{"PATH=/bin"},
		Ops: []fsOp{{Op: "bind", Target: boxWatcherPath, TreeFD: 9}}}
	for _, tc := range []struct {
		name     string
		p        startPrep
		wantPath string
		wantMaps bool
		wantCgFD bool
		wantNS   bool
	}{
		{"rootful, v2", startPrep{cfg: cfg, idStart: 200000, cgDir: devnull, extra: []*os.File{extra}}, "/proc/self/fd/9", true, true, false},
		{"rootful, v1", startPrep{cfg: cfg, idStart: 200000, cgTasks: []*os.File{devnull}}, "/proc/self/fd/9", true, false, true},
		{"unprivileged, no cgroup", startPrep{cfg: nsinitConfig{Argv: cfg.Argv}, rootless: true}, "/usr/local/bin/watcher", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := initCmd(b, &tc.p, os.Stderr, ctl, set, devnull)
			if cmd.Path != tc.wantPath {
				t.Errorf("Path = %q, want %q", cmd.Path, tc.wantPath)
			}
			if want := []string{"watcher", "--control=fd:3", "--box-init"}; !reflect.DeepEqual(cmd.Args, want) {
				t.Errorf("Args = %q, want %q", cmd.Args, want)
			}
			if want := append([]*os.File{ctl, set, nil}, tc.p.extra...); !reflect.DeepEqual(cmd.ExtraFiles, want) {
				t.Errorf("ExtraFiles = %v, want %v", cmd.ExtraFiles, want)
			}
			if cmd.Stdin != devnull || cmd.Stdout != devnull {
				t.Errorf("stdin/stdout are not /dev/null")
			}
			a := cmd.SysProcAttr
			if a.Pdeathsig != unix.SIGKILL {
				t.Errorf("Pdeathsig = %v, want SIGKILL", a.Pdeathsig)
			}
			if a.Cloneflags&unix.CLONE_NEWUSER == 0 || a.Cloneflags&unix.CLONE_NEWPID == 0 {
				t.Errorf("Cloneflags %#x lack a user or PID namespace", a.Cloneflags)
			}
			m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 200000, Size: IDRangeSize}}
			if got := a.UidMappings != nil; got != tc.wantMaps {
				t.Errorf("uid maps set = %v, want %v", got, tc.wantMaps)
			} else if tc.wantMaps && (!reflect.DeepEqual(a.UidMappings, m) || !reflect.DeepEqual(a.GidMappings, m) || a.Credential == nil || a.Credential.Uid != 0) {
				t.Errorf("maps %v/%v, credential %v: want the box's range and its root", a.UidMappings, a.GidMappings, a.Credential)
			}
			if a.UseCgroupFD != tc.wantCgFD {
				t.Errorf("UseCgroupFD = %v, want %v", a.UseCgroupFD, tc.wantCgFD)
			}
			if got := a.Cloneflags&unix.CLONE_NEWCGROUP != 0; got != tc.wantNS {
				t.Errorf("CLONE_NEWCGROUP = %v, want %v", got, tc.wantNS)
			}
		})
	}
}
