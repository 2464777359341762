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
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"deathwatch/shared"
)

// NsinitArg is the hidden first argument that turns the supervisor
// binary into the native box's init stage: Main hands over to NsinitMain
// before it does anything else. The stage runs inside the new
// namespaces, builds the box's file system, and execs the watcher as
// PID 1. Its settings arrive over an inherited descriptor, never argv.
const NsinitArg = "__nsinit"

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
}

// nsinitConfig is everything the init stage does, worked out by the
// supervisor as plain data.
type nsinitConfig struct {
	Root       string // host folder that becomes the box's / (recursive, read-only)
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
}

// hostDevices are bind-mounted from the host into the box's /dev.
var hostDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// reservedTargets are mount points the box's setup owns.
var reservedTargets = []string{"/", "/proc", "/dev"}

// nsinitPlan works out the init stage's settings for a box. root is the
// host folder for the box's / ("/" for the host root); watcher is the
// host path of the static watcher.
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
	ops := []fsOp{
		{Op: "mount", Source: "proc", Target: "/proc", Flags: nosuid | nodev | noexec},
		// Kernel-wide knobs stay read-only even for an agent allowed uid 0.
		{Op: "rebind-ro", Target: "/proc/sys"},
		{Op: "rebind-ro", Target: "/proc/sysrq-trigger"},
		{Op: "mount", Source: "tmpfs", Target: "/dev", Flags: nosuid | noexec, Data: "mode=0755,size=1m"},
	}
	if network == "none" {
		// The box's own network namespace in /sys (only lo), read-only,
		// instead of the host's devices.
		ops = append([]fsOp{{Op: "mount", Source: "sysfs", Target: "/sys", Flags: unix.MS_RDONLY | nosuid | nodev | noexec, Optional: true}}, ops...)
	}
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
		fsOp{Op: "mount", Source: "tmpfs", Target: "/dev/shm", Flags: nosuid | nodev, Data: "mode=1777"},
		fsOp{Op: "symlink", Source: "/proc/self/fd", Target: "/dev/fd"},
		fsOp{Op: "symlink", Source: "/proc/self/fd/0", Target: "/dev/stdin"},
		fsOp{Op: "symlink", Source: "/proc/self/fd/1", Target: "/dev/stdout"},
		fsOp{Op: "symlink", Source: "/proc/self/fd/2", Target: "/dev/stderr"},
		fsOp{Op: "mkdir", Target: boxWatcherDir, Mode: 0o755},
		fsOp{Op: "file", Target: boxWatcherPath, Mode: 0o755},
		fsOp{Op: "bind", Source: watcher, Target: boxWatcherPath, ReadOnly: true},
		fsOp{Op: "mount", Source: "tmpfs", Target: "/tmp", Flags: nosuid | nodev, Data: "mode=1777"},
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
		ops = append(ops, fsOp{Op: "bind", Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly, Mkdir: true})
	}
	// /dev is complete: make its tmpfs read-only (pts and shm stay as they are).
	ops = append(ops, fsOp{Op: "readonly", Target: "/dev"})
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
func applyNsinit(c nsinitConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", os.NewSyscallError("mount", err))
	}
	// Open the cgroup files while the host's cgroup mounts are in reach.
	var tasks []int
	for _, p := range c.CgroupTasks {
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s to join the box cgroup: %w", p, os.NewSyscallError("open", err))
		}
		tasks = append(tasks, fd)
	}
	// Open every host path first: detached copies of their mounts.
	trees := map[int]int{}
	for i, op := range c.Ops {
		if op.Op != "bind" {
			continue
		}
		fd, err := cloneTree(op.Source, op.ReadOnly)
		if err != nil {
			return err
		}
		trees[i] = fd
	}
	rootFD, err := cloneTree(c.Root, true)
	if err != nil {
		return fmt.Errorf("root: %w", err)
	}
	if err := unix.MoveMount(rootFD, "", unix.AT_FDCWD, staging, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach root %s: %w", c.Root, os.NewSyscallError("move_mount", err))
	}
	unix.Close(rootFD)
	for i, op := range c.Ops {
		if err := applyOp(op, trees[i]); err != nil {
			return err
		}
	}
	if c.LoopbackUp {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("find lo in the box's network namespace: %w", err)
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return fmt.Errorf("bring lo up: %w", err)
		}
	}
	if c.Hostname != "" {
		if err := unix.Sethostname([]byte(c.Hostname)); err != nil {
			return fmt.Errorf("set hostname %q: %w", c.Hostname, os.NewSyscallError("sethostname", err))
		}
	}
	if err := unix.Chdir(staging); err != nil {
		return fmt.Errorf("enter new root: %w", os.NewSyscallError("chdir", err))
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

// cloneTree returns a detached copy of the mounts at host path p,
// read-only (recursively) when asked.
func cloneTree(p string, readOnly bool) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("open %s for a bind mount: %w", p, os.NewSyscallError("open_tree", err))
	}
	attr := unix.MountAttr{Propagation: unix.MS_PRIVATE}
	if readOnly {
		attr.Attr_set = unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("make the bind mount of %s read-only and private: %w", p, os.NewSyscallError("mount_setattr", err))
	}
	return fd, nil
}

// applyOp applies one step below the staging root. tree is the
// detached mount of a bind step.
func applyOp(op fsOp, tree int) error {
	t := filepath.Join(staging, op.Target)
	switch op.Op {
	case "mount":
		if _, err := os.Lstat(t); op.Optional && errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err := unix.Mount(op.Source, t, op.Source, op.Flags, op.Data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", op.Source, op.Target, os.NewSyscallError("mount", err))
		}
	case "mkdir":
		if err := unix.Mkdir(t, op.Mode); err != nil && err != unix.EEXIST {
			return fmt.Errorf("create %s: %w", op.Target, os.NewSyscallError("mkdir", err))
		}
		if err := unix.Chmod(t, op.Mode); err != nil {
			return fmt.Errorf("chmod %s: %w", op.Target, os.NewSyscallError("chmod", err))
		}
	case "file":
		fd, err := unix.Open(t, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, op.Mode)
		if err != nil {
			return fmt.Errorf("create %s: %w", op.Target, os.NewSyscallError("open", err))
		}
		unix.Close(fd)
	case "symlink":
		if err := unix.Symlink(op.Source, t); err != nil {
			return fmt.Errorf("link %s to %s: %w", op.Target, op.Source, os.NewSyscallError("symlink", err))
		}
	case "bind":
		if err := bindTarget(op, t, tree); err != nil {
			return err
		}
		if err := unix.MoveMount(tree, "", unix.AT_FDCWD, t, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("bind %s on %s: %w", op.Source, op.Target, os.NewSyscallError("move_mount", err))
		}
		unix.Close(tree)
	case "rebind-ro":
		if _, err := os.Lstat(t); errors.Is(err, os.ErrNotExist) {
			return nil // this kernel has no such file
		}
		fd, err := cloneTree(t, true)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, t, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("make %s read-only: %w", op.Target, os.NewSyscallError("move_mount", err))
		}
	case "readonly":
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(unix.AT_FDCWD, t, 0, &attr); err != nil {
			return fmt.Errorf("make %s read-only: %w", op.Target, os.NewSyscallError("mount_setattr", err))
		}
	default:
		return fmt.Errorf("unknown setup step %q", op.Op)
	}
	return nil
}

// bindTarget makes sure a bind mount's target exists with the type of
// its source, creating it when asked (possible only below a writable
// part of the box, such as /tmp).
func bindTarget(op fsOp, t string, tree int) error {
	if _, err := os.Lstat(t); err == nil || !op.Mkdir {
		return nil
	}
	// The source's host path may be covered by now: ask the open tree.
	var st unix.Stat_t
	if err := unix.Fstat(tree, &st); err != nil {
		return fmt.Errorf("mount source %s: %w", op.Source, os.NewSyscallError("fstat", err))
	}
	if err := os.MkdirAll(filepath.Dir(t), 0o755); err != nil {
		return mountTargetError(op.Target, err)
	}
	var err error
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = os.Mkdir(t, 0o755)
	} else {
		var f *os.File
		if f, err = os.OpenFile(t, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			f.Close()
		}
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return mountTargetError(op.Target, err)
	}
	return nil
}

func mountTargetError(target string, err error) error {
	if errors.Is(err, unix.EROFS) {
		return fmt.Errorf("mount target %s does not exist in the box's read-only root; pick a target that exists there, or one below /tmp", target)
	}
	return fmt.Errorf("create mount target %s: %w", target, err)
}
