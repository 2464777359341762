package native

import (
	"deathwatch/supervisor"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"deathwatch/shared"
)

// NsinitArg is the hidden first argument that turns the supervisor
// binary into the native box's init stage: Main hands over to NsinitMain
// before it does anything else. The stage runs inside the new
// namespaces, builds the box's file system, and execs the watcher as
// PID 1. Its settings arrive over an inherited descriptor, never argv.
const NsinitArg = "__nsinit"

// nsinitHoldArg (after NsinitArg) makes the stage a placeholder that
// holds a user namespace open until its stdin ends.
const nsinitHoldArg = "hold-userns"

// Descriptors the native runtime hands to the init stage.
const (
	nsinitControlFD  = 3 // the box's end of the control socketpair; stays fd 3 for the watcher (--control=fd:3)
	nsinitSettingsFD = 4 // settings in (one JSON value), error text out; close-on-exec, so EOF means the watcher runs
	nsinitReexecFD   = 5 // stage 2 of a user-namespace box: the settings again, from a pipe
)

// Where the watcher sits inside every native box: on the box's own
// /dev tmpfs (which exists in any root), bind-mounted read-only.
const (
	boxWatcherDir  = "/dev/.deathwatch"
	boxWatcherPath = boxWatcherDir + "/watcher"
)

// fsOp is one step of the box's file-system setup, applied in order
// below the new root before pivot_root.
type fsOp struct {
	Op       string // bind | mount | mkdir | file | symlink | readonly | rebind-ro
	Source   string // bind: host path; mount: file system type; symlink: link text
	Target   string // absolute path inside the box
	Flags    uintptr
	Data     string
	ReadOnly bool // bind: recursive read-only
	Mode     uint32
	Mkdir    bool // bind: create the mount point (and parents) when missing
	Optional bool // mount: skip when the root has no such mount point
	// TreeFD is, for a bind step, a detached mount the supervisor
	// opened and passed to the init stage (an idmapped --mount); 0: the
	// init stage opens Source itself.
	TreeFD int `json:",omitempty"`
	// Idmap marks a --mount: as root, its files are mapped to the
	// agent through an idmapped mount (see idmapTrees).
	Idmap bool `json:",omitempty"`
}

// nsinitConfig is everything the init stage does, worked out by the
// supervisor as plain data.
type nsinitConfig struct {
	// Root is the host folder that becomes the box's / (recursive,
	// read-only); "" is the minimal root: a small tmpfs that Ops fill
	// with read-only binds of what commands need, read-only at the end.
	Root string
	// RootFD is Root as a detached tree the supervisor opened (as root,
	// see openTrees); 0: the init stage opens Root itself.
	RootFD     int `json:",omitempty"`
	Ops        []fsOp
	Hostname   string
	LoopbackUp bool     // network none: bring lo up in the new network namespace
	Exec       string   // path inside the box of what to exec (the watcher)
	Argv       []string // its argv
	Env        []string // its environment (never the agent's: that is in the spec frame)
	Reexec     bool     // user namespace: exec self once more after the uid map is written, to hold capabilities
	// CgroupTasks are the v1 "tasks" files of the box cgroup. The init
	// stage moves its exec'ing thread there right before the exec: a
	// thread moving itself skips the global lock (and RCU wait) that
	// moving a whole process from outside takes, several ms a box.
	CgroupTasks []string
	// CgroupTaskFDs are those files, opened by the supervisor and
	// inherited: a box in a user namespace of its own may not open them.
	CgroupTaskFDs []int `json:",omitempty"`
}

// hostDevices are bind-mounted from the host into the box's /dev.
var hostDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// reservedTargets are mount points the box's setup owns.
var reservedTargets = []string{"/", "/proc", "/dev"}

// Default bounds of the box's own tmpfs folders. Their pages are
// charged to the memory cgroup of the process that writes them (the
// box's), and the inode counts bound a flood of empty files.
const (
	TmpSize   = "size=1g,nr_inodes=262144"
	ShmSize   = "size=256m,nr_inodes=16384"
	rootSize  = "size=1m,nr_inodes=4096" // the minimal root: folders, mount points and links only
	devTmpfs  = "mode=0755,size=1m,nr_inodes=4096"
	minRootFS = "mode=0755," + rootSize
)

// minimalRootDirs are the host trees a box on the host root sees (all
// read-only): what commands need. Nothing else of the host is there: no
// /run, /var/run, /tmp, /var/tmp, /home, /root, /srv, /mnt, /media, so
// no host socket can be reached by its path.
var minimalRootDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// minimalEtc is the filtered /etc of the minimal root: names, libraries,
// time, certificates and shell set-up; no credentials, no service
// configuration (a file the host lets others read is still only
// readable, never writable).
var minimalEtc = []string{
	"passwd", "group", "hosts", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf",
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "alternatives",
	"ssl", "ca-certificates", "ca-certificates.conf", "pki", "os-release", "lsb-release",
	"debian_version", "alpine-release", "redhat-release", "profile", "profile.d", "bash.bashrc",
	"environment", "inputrc", "mime.types", "protocols", "services", "shells", "terminfo", "magic", "magic.mime",
}

// hostView is how the planner looks at the host root (a fake in tests).
type hostView interface {
	Lstat(p string) (os.FileInfo, error)
	Readlink(p string) (string, error)
}

type osView struct{}

func (osView) Lstat(p string) (os.FileInfo, error) { return os.Lstat(p) }
func (osView) Readlink(p string) (string, error)   { return os.Readlink(p) }

// hostRoot is what the planner reads the host root through.
var hostRoot hostView = osView{}

// minimalRootOps fill the minimal root: its own mount points, then the
// host trees and the filtered /etc, read-only; links stay links.
func minimalRootOps(h hostView) []fsOp {
	ops := []fsOp{
		{Op: "mkdir", Target: "/proc", Mode: 0o555},
		{Op: "mkdir", Target: "/dev", Mode: 0o755},
		{Op: "mkdir", Target: "/sys", Mode: 0o555},
		{Op: "mkdir", Target: "/tmp", Mode: 0o1777},
		{Op: "mkdir", Target: "/etc", Mode: 0o755},
		{Op: "mkdir", Target: "/var", Mode: 0o755},
	}
	add := func(p string) {
		fi, err := h.Lstat(p)
		if err != nil {
			return
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			if link, err := h.Readlink(p); err == nil {
				ops = append(ops, fsOp{Op: "symlink", Source: link, Target: p})
			}
		case fi.IsDir() || fi.Mode().IsRegular():
			ops = append(ops, fsOp{Op: "bind", Source: p, Target: p, ReadOnly: true, Mkdir: true})
		}
	}
	for _, d := range minimalRootDirs {
		add(d)
	}
	for _, e := range minimalEtc {
		add("/etc/" + e)
	}
	return ops
}

// inMinimalRoot reports whether path p of a box on the host root lies in
// what the minimal root shows of the host (and so exists only if the
// host has it), and under which host tree.
func inMinimalRoot(p string) (string, bool) {
	for _, d := range minimalRootDirs {
		if under(p, d) {
			return d, true
		}
	}
	for _, e := range minimalEtc {
		if under(p, "/etc/"+e) {
			return "/etc/" + e, true
		}
	}
	return "", false
}

// nsinitPlan works out the init stage's settings for a box. root is the
// host folder for the box's / ("/": the minimal root, see
// minimalRootDirs); watcher is the host path of the static watcher.
func nsinitPlan(b *supervisor.Box, root, watcher string, userns bool) (nsinitConfig, error) {
	if !filepath.IsAbs(root) {
		return nsinitConfig{}, fmt.Errorf("root %q is not an absolute path", root)
	}
	if !filepath.IsAbs(watcher) {
		return nsinitConfig{}, fmt.Errorf("watcher %q is not an absolute path", watcher)
	}
	var network string
	switch b.Network {
	case "", "none":
		network = "none"
	case "host":
		network = "host"
	default:
		return nsinitConfig{}, fmt.Errorf("network %q: the native runtime offers none or host", b.Network)
	}
	const (
		nosuid = unix.MS_NOSUID
		nodev  = unix.MS_NODEV
		noexec = unix.MS_NOEXEC
	)
	var ops []fsOp
	minimal := root == "/"
	if minimal {
		ops = minimalRootOps(hostRoot)
	}
	if network == "none" {
		// The box's own network namespace in /sys (only lo), read-only,
		// instead of the host's devices.
		ops = append(ops, fsOp{Op: "mount", Source: "sysfs", Target: "/sys", Flags: unix.MS_RDONLY | nosuid | nodev | noexec, Optional: true})
	}
	ops = append(ops,
		fsOp{Op: "mount", Source: "proc", Target: "/proc", Flags: nosuid | nodev | noexec},
		// Kernel-wide knobs stay read-only even for an agent allowed uid 0.
		fsOp{Op: "rebind-ro", Target: "/proc/sys"},
		fsOp{Op: "rebind-ro", Target: "/proc/sysrq-trigger"},
		fsOp{Op: "mount", Source: "tmpfs", Target: "/dev", Flags: nosuid | noexec, Data: devTmpfs},
	)
	for _, d := range hostDevices {
		ops = append(ops,
			fsOp{Op: "file", Target: "/dev/" + d, Mode: 0o666},
			fsOp{Op: "bind", Source: "/dev/" + d, Target: "/dev/" + d})
	}
	ops = append(ops,
		fsOp{Op: "mkdir", Target: "/dev/pts", Mode: 0o755},
		fsOp{Op: "mount", Source: "devpts", Target: "/dev/pts", Flags: nosuid | noexec, Data: "newinstance,ptmxmode=0666,mode=0620"},
		fsOp{Op: "symlink", Source: "pts/ptmx", Target: "/dev/ptmx"},
		fsOp{Op: "mkdir", Target: "/dev/shm", Mode: 0o1777},
		fsOp{Op: "mount", Source: "tmpfs", Target: "/dev/shm", Flags: nosuid | nodev, Data: "mode=1777," + ShmSize},
		fsOp{Op: "symlink", Source: "/proc/self/fd", Target: "/dev/fd"},
		fsOp{Op: "symlink", Source: "/proc/self/fd/0", Target: "/dev/stdin"},
		fsOp{Op: "symlink", Source: "/proc/self/fd/1", Target: "/dev/stdout"},
		fsOp{Op: "symlink", Source: "/proc/self/fd/2", Target: "/dev/stderr"},
		fsOp{Op: "mkdir", Target: boxWatcherDir, Mode: 0o755},
		fsOp{Op: "file", Target: boxWatcherPath, Mode: 0o755},
		fsOp{Op: "bind", Source: watcher, Target: boxWatcherPath, ReadOnly: true},
		fsOp{Op: "mount", Source: "tmpfs", Target: "/tmp", Flags: nosuid | nodev, Data: "mode=1777," + TmpSize},
	)
	mounts := append([]supervisor.Mount(nil), b.Mounts...)
	sort.SliceStable(mounts, func(i, j int) bool { return mounts[i].Target < mounts[j].Target })
	for _, m := range mounts {
		if !filepath.IsAbs(m.Source) {
			return nsinitConfig{}, fmt.Errorf("mount source %q is not an absolute path", m.Source)
		}
		if !path.IsAbs(m.Target) || path.Clean(m.Target) != m.Target {
			return nsinitConfig{}, fmt.Errorf("mount target %q is not a clean absolute path", m.Target)
		}
		for _, r := range reservedTargets {
			if m.Target == r || (r != "/" && strings.HasPrefix(m.Target, r+"/")) {
				return nsinitConfig{}, fmt.Errorf("mount target %q: %s belongs to the box's own setup", m.Target, r)
			}
		}
		ops = append(ops, fsOp{Op: "bind", Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly, Mkdir: true, Idmap: true})
	}
	// /dev is complete: make its tmpfs read-only (pts and shm stay as they are).
	ops = append(ops, fsOp{Op: "readonly", Target: "/dev"})
	if minimal {
		ops = append(ops, fsOp{Op: "readonly", Target: "/"})
		root = ""
	}
	host := b.Name
	if len(host) > 63 {
		host = host[:63]
	}
	return nsinitConfig{
		Root:       root,
		Ops:        ops,
		Hostname:   host,
		LoopbackUp: network == "none",
		Exec:       boxWatcherPath,
		Argv:       []string{"watcher", fmt.Sprintf("--control=fd:%d", nsinitControlFD)},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", supervisor.WatcherEnv},
		Reexec:     userns,
	}, nil
}

// NsinitMain is the init stage (see NsinitArg). It returns only on
// failure, after writing one line about it to the settings descriptor.
func NsinitMain() int {
	if len(os.Args) > 2 && os.Args[2] == nsinitHoldArg {
		// A user namespace for an idmapped mount: the supervisor opens
		// /proc/PID/ns/user, then closes our stdin.
		io.Copy(io.Discard, os.Stdin)
		return 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(nsinitSettingsFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		fmt.Fprintf(os.Stderr, "supervisor: %s is the native runtime's internal init stage; it is not run by hand\n", NsinitArg)
		return shared.ExitUsage
	}
	status := os.NewFile(nsinitSettingsFD, "settings")
	unix.CloseOnExec(nsinitSettingsFD)
	fail := func(err error) int {
		fmt.Fprintf(status, "%v", err)
		return shared.ExitSetupFailed
	}
	var in io.Reader = status
	stage2 := len(os.Args) > 2 && os.Args[2] == "2"
	if stage2 {
		in = os.NewFile(nsinitReexecFD, "settings-again")
	}
	var c nsinitConfig
	if err := json.NewDecoder(in).Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return shared.ExitSetupFailed // the supervisor went away before sending settings
		}
		return fail(fmt.Errorf("read box settings: %w", err))
	}
	if c.Reexec && !stage2 {
		if err := reexecNsinit(c); err != nil {
			return fail(err)
		}
	}
	if stage2 {
		unix.Close(nsinitReexecFD)
	}
	return fail(applyNsinit(c))
}

// reexecNsinit runs the init stage again with the settings on a pipe.
// A process that entered a user namespace before its uid map was
// written holds no capabilities there; an exec as the mapped root
// grants them.
func reexecNsinit(c nsinitConfig) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], 0); err != nil {
		return os.NewSyscallError("pipe2", err)
	}
	if len(b) > 60<<10 {
		return fmt.Errorf("box settings of %d bytes do not fit a pipe", len(b))
	}
	if _, err := unix.Write(p[1], b); err != nil {
		return os.NewSyscallError("write settings pipe", err)
	}
	unix.Close(p[1])
	if err := unix.Dup2(p[0], nsinitReexecFD); err != nil {
		return os.NewSyscallError("dup2 settings pipe", err)
	}
	// The status descriptor must survive this exec (EOF on it means the
	// watcher runs); stage 2 sets close-on-exec again.
	if _, err := unix.FcntlInt(nsinitSettingsFD, unix.F_SETFD, 0); err != nil {
		return os.NewSyscallError("fcntl(F_SETFD)", err)
	}
	if err := unix.Setresuid(0, 0, 0); err != nil {
		return fmt.Errorf("become root in the user namespace: %w (is the uid map written?)", os.NewSyscallError("setresuid", err))
	}
	err = unix.Exec("/proc/self/exe", []string{os.Args[0], NsinitArg, "2"}, os.Environ())
	return fmt.Errorf("re-exec init stage: %w", os.NewSyscallError("execve /proc/self/exe", err))
}

// staging is where the new root is attached before pivot_root. Every
// host path is resolved (opened) before it is covered.
const staging = "/tmp"

// applyNsinit builds the box's file system and execs the watcher. It
// runs in the new mount namespace as its init; the namespace dies with
// it, so a failure half way leaves nothing on the host.
//
// Nothing here follows a path string a box could have changed: host
// sources are opened with openat2(RESOLVE_NO_SYMLINKS) and cloned by
// descriptor; every target is resolved beneath the new root with
// openat2(RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS) and mounted on through
// its descriptor (move_mount, or /proc/self/fd/N).
func applyNsinit(c nsinitConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", os.NewSyscallError("mount", err))
	}
	tasks := c.CgroupTaskFDs
	for _, fd := range tasks {
		unix.CloseOnExec(fd)
	}
	// Open every host path first: detached copies of their mounts.
	trees := map[int]int{}
	for i, op := range c.Ops {
		if op.Op != "bind" {
			continue
		}
		if op.TreeFD > 0 {
			unix.CloseOnExec(op.TreeFD)
			trees[i] = op.TreeFD
			continue
		}
		fd, err := cloneTree(op.Source, op.ReadOnly)
		if err != nil {
			return err
		}
		trees[i] = fd
	}
	if c.Root == "" {
		if err := unix.Mount("tmpfs", staging, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, minRootFS); err != nil {
			return fmt.Errorf("mount the box's root: %w", os.NewSyscallError("mount", err))
		}
	} else {
		rootFD := c.RootFD
		if rootFD > 0 {
			unix.CloseOnExec(rootFD)
		} else {
			var err error
			if rootFD, err = cloneTree(c.Root, true); err != nil {
				return fmt.Errorf("root: %w", err)
			}
		}
		if err := unix.MoveMount(rootFD, "", unix.AT_FDCWD, staging, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach root %s: %w", c.Root, os.NewSyscallError("move_mount", err))
		}
		unix.Close(rootFD)
	}
	root, err := unix.Open(staging, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the new root: %w", os.NewSyscallError("open", err))
	}
	defer unix.Close(root)
	for i, op := range c.Ops {
		if err := applyOp(root, op, trees[i]); err != nil {
			return err
		}
	}
	if c.LoopbackUp {
		if err := loopbackUp(); err != nil {
			return err
		}
	}
	if c.Hostname != "" {
		if err := unix.Sethostname([]byte(c.Hostname)); err != nil {
			return fmt.Errorf("set hostname %q: %w", c.Hostname, os.NewSyscallError("sethostname", err))
		}
	}
	if err := unix.Fchdir(root); err != nil {
		return fmt.Errorf("enter new root: %w", os.NewSyscallError("fchdir", err))
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot to new root: %w", os.NewSyscallError("pivot_root", err))
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", os.NewSyscallError("umount2", err))
	}
	if err := unix.Chdir("/"); err != nil {
		return os.NewSyscallError("chdir /", err)
	}
	// Join the cgroup on the thread that execs: after the exec that
	// thread is the whole process, and everything it starts follows.
	runtime.LockOSThread()
	for i, fd := range tasks {
		if _, err := unix.Write(fd, []byte("0")); err != nil {
			return fmt.Errorf("join the box cgroup (%s): %w", c.CgroupTasks[i], os.NewSyscallError("write", err))
		}
	}
	// A cgroup namespace rooted at the box's cgroup: the agent sees "/"
	// in /proc/self/cgroup, not the host's layout.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("new cgroup namespace: %w", os.NewSyscallError("unshare", err))
	}
	err = unix.Exec(c.Exec, c.Argv, c.Env)
	return fmt.Errorf("exec watcher %s in the box: %w", c.Exec, os.NewSyscallError("execve", err))
}

// loopbackUp brings lo up in the box's network namespace: two ioctls on
// a datagram socket (the netlink library took two netlink round trips
// and its own package start).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring lo up: %w", os.NewSyscallError("socket", err))
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("find lo in the box's network namespace: %w", os.NewSyscallError("ioctl(SIOCGIFFLAGS)", err))
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", os.NewSyscallError("ioctl(SIOCSIFFLAGS)", err))
	}
	return nil
}

// openHostSource opens a host path for a bind mount without following
// any symlink on the way: a link in a folder a box could write (a
// previous box's --mount) must never redirect the next box's mount.
func openHostSource(p string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == unix.ELOOP {
		return -1, fmt.Errorf("mount source %s passes through a symlink: refused (a link could have been planted there); name the real path", p)
	}
	if err != nil {
		return -1, fmt.Errorf("open mount source %s: %w", p, os.NewSyscallError("openat2", err))
	}
	return fd, nil
}

// cloneTree returns a detached copy of the mounts at host path p,
// read-only (recursively) when asked.
func cloneTree(p string, readOnly bool) (int, error) {
	src, err := openHostSource(p)
	if err != nil {
		return -1, err
	}
	defer unix.Close(src)
	fd, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("open %s for a bind mount: %w", p, os.NewSyscallError("open_tree", err))
	}
	if err := setTreeAttr(fd, readOnly, -1); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("make the bind mount of %s read-only and private: %w", p, err)
	}
	return fd, nil
}

// setTreeAttr makes a detached tree private, read-only when asked, and
// idmapped through the user namespace userns when that is not -1.
func setTreeAttr(fd int, readOnly bool, userns int) error {
	attr := unix.MountAttr{Propagation: unix.MS_PRIVATE}
	if readOnly {
		attr.Attr_set = unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return os.NewSyscallError("mount_setattr", err)
	}
	if userns >= 0 {
		// The idmapping goes on the top mount only (the kernel refuses
		// it recursively on a tree with mounts it cannot map).
		idm := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &idm); err != nil {
			return os.NewSyscallError("mount_setattr(MOUNT_ATTR_IDMAP)", err)
		}
	}
	return nil
}

// inRoot resolves target (absolute, in the box) beneath the new root
// without following any symlink, opened with flags (O_PATH and
// O_CLOEXEC are added).
func inRoot(root int, target string, flags int) (int, error) {
	rel := strings.TrimPrefix(target, "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_PATH | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == unix.ELOOP {
		return -1, fmt.Errorf("%s passes through a symlink in the box: refused (a link could have been planted there); name the real path", target)
	}
	if err != nil {
		return -1, &os.PathError{Op: "openat2", Path: target, Err: err}
	}
	return fd, nil
}

// inRootParent opens the folder that holds target, and names target's
// last part.
func inRootParent(root int, target string) (int, string, error) {
	dir, base := path.Split(path.Clean(target))
	if base == "" || base == "." || base == ".." {
		return -1, "", fmt.Errorf("%s: no file name", target)
	}
	fd, err := inRoot(root, dir, unix.O_DIRECTORY)
	return fd, base, err
}

// fdPath names an open descriptor for calls that take only a path.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// applyOp applies one step below the new root. tree is the detached
// mount of a bind step.
func applyOp(root int, op fsOp, tree int) error {
	switch op.Op {
	case "mount":
		t, err := inRoot(root, op.Target, unix.O_DIRECTORY)
		if op.Optional && errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("mount %s on %s: %w", op.Source, op.Target, err)
		}
		defer unix.Close(t)
		if err := unix.Mount(op.Source, fdPath(t), op.Source, op.Flags, op.Data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", op.Source, op.Target, os.NewSyscallError("mount", err))
		}
	case "mkdir":
		dir, base, err := inRootParent(root, op.Target)
		if err != nil {
			return fmt.Errorf("create %s: %w", op.Target, err)
		}
		defer unix.Close(dir)
		if err := unix.Mkdirat(dir, base, op.Mode); err != nil && err != unix.EEXIST {
			return fmt.Errorf("create %s: %w", op.Target, os.NewSyscallError("mkdirat", err))
		}
		t, err := inRoot(dir, base, unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("create %s: %w", op.Target, err)
		}
		defer unix.Close(t)
		if err := unix.Chmod(fdPath(t), op.Mode); err != nil {
			return fmt.Errorf("chmod %s: %w", op.Target, os.NewSyscallError("chmod", err))
		}
	case "file":
		dir, base, err := inRootParent(root, op.Target)
		if err != nil {
			return fmt.Errorf("create %s: %w", op.Target, err)
		}
		defer unix.Close(dir)
		fd, err := unix.Openat(dir, base, unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, op.Mode)
		if err != nil {
			return fmt.Errorf("create %s: %w", op.Target, os.NewSyscallError("openat", err))
		}
		unix.Close(fd)
	case "symlink":
		dir, base, err := inRootParent(root, op.Target)
		if err != nil {
			return fmt.Errorf("link %s: %w", op.Target, err)
		}
		defer unix.Close(dir)
		if err := unix.Symlinkat(op.Source, dir, base); err != nil {
			return fmt.Errorf("link %s to %s: %w", op.Target, op.Source, os.NewSyscallError("symlinkat", err))
		}
	case "bind":
		t, err := bindTarget(root, op, tree)
		if err != nil {
			return err
		}
		defer unix.Close(t)
		if err := unix.MoveMount(tree, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return fmt.Errorf("bind %s on %s: %w", op.Source, op.Target, os.NewSyscallError("move_mount", err))
		}
		unix.Close(tree)
	case "rebind-ro":
		t, err := inRoot(root, op.Target, 0)
		if errors.Is(err, unix.ENOENT) {
			return nil // this kernel has no such file
		}
		if err != nil {
			return fmt.Errorf("make %s read-only: %w", op.Target, err)
		}
		defer unix.Close(t)
		fd, err := unix.OpenTree(t, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
		if err != nil {
			return fmt.Errorf("make %s read-only: %w", op.Target, os.NewSyscallError("open_tree", err))
		}
		defer unix.Close(fd)
		if err := setTreeAttr(fd, true, -1); err != nil {
			return fmt.Errorf("make %s read-only: %w", op.Target, err)
		}
		if err := unix.MoveMount(fd, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return fmt.Errorf("make %s read-only: %w", op.Target, os.NewSyscallError("move_mount", err))
		}
	case "readonly":
		t, err := inRoot(root, op.Target, unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("make %s read-only: %w", op.Target, err)
		}
		defer unix.Close(t)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			return fmt.Errorf("make %s read-only: %w", op.Target, os.NewSyscallError("mount_setattr", err))
		}
	default:
		return fmt.Errorf("unknown setup step %q", op.Op)
	}
	return nil
}

// bindTarget opens a bind mount's target beneath the new root, creating
// it (and its parents) with the type of its source when asked: possible
// only below a writable part of the box, such as /tmp or the minimal
// root. No part of the way may be a symlink.
func bindTarget(root int, op fsOp, tree int) (int, error) {
	t, err := inRoot(root, op.Target, 0)
	if err == nil || !op.Mkdir || !errors.Is(err, unix.ENOENT) {
		if err != nil {
			return -1, mountTargetError(op.Target, err)
		}
		return t, nil
	}
	// The source's host path may be covered by now: ask the open tree.
	var st unix.Stat_t
	if err := unix.Fstat(tree, &st); err != nil {
		return -1, fmt.Errorf("mount source %s: %w", op.Source, os.NewSyscallError("fstat", err))
	}
	// Most often only the last part is missing (the minimal root's
	// /etc/NAME): make it in its parent, the walk's last step alone.
	if parent, base, err := inRootParent(root, op.Target); err == nil {
		t, err := makeIn(parent, base, st.Mode&unix.S_IFMT == unix.S_IFDIR)
		unix.Close(parent)
		if err != nil {
			return -1, mountTargetError(op.Target, err)
		}
		return t, nil
	}
	dir, err := inRoot(root, "/", unix.O_DIRECTORY)
	if err != nil {
		return -1, mountTargetError(op.Target, err)
	}
	parts := strings.Split(strings.TrimPrefix(op.Target, "/"), "/")
	for i, p := range parts {
		last := i == len(parts)-1
		next, err := makeIn(dir, p, !last || st.Mode&unix.S_IFMT == unix.S_IFDIR)
		unix.Close(dir)
		if err != nil {
			return -1, mountTargetError(op.Target, err)
		}
		dir = next
	}
	return dir, nil
}

// makeIn opens name in the folder dir (beneath it, no symlink),
// creating it first when missing: a folder, or an empty file.
func makeIn(dir int, name string, folder bool) (int, error) {
	fd, err := inRoot(dir, name, 0)
	if !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	if folder {
		err = unix.Mkdirat(dir, name, 0o755)
	} else {
		var f int
		if f, err = unix.Openat(dir, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644); err == nil {
			unix.Close(f)
		}
	}
	if err != nil && err != unix.EEXIST {
		return -1, err
	}
	return inRoot(dir, name, 0)
}

func mountTargetError(target string, err error) error {
	if errors.Is(err, unix.EROFS) || errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("mount target %s does not exist in the box's read-only root; pick a target that exists there, or one below /tmp", target)
	}
	return fmt.Errorf("create mount target %s: %w", target, err)
}
