package boxinit

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"deathwatch/shared"
)

// Arg, the last argument of the watcher binary, makes it the native
// box's init stage (stage2Arg: its second start in an unprivileged box).
// The stage runs inside the new namespaces, builds the box's file
// system, and goes on as the watcher. Its settings arrive over an
// inherited descriptor, never argv; the watcher's own arguments come
// first, so PID 1 of a box reads "watcher --control=fd:3 ...".
const (
	Arg       = "--box-init"
	stage2Arg = "--box-init=2"
)

// Descriptors the native runtime hands to the init stage.
const (
	ControlFD  = 3 // the box's end of the control socketpair; stays fd 3 for the watcher (--control=fd:3)
	SettingsFD = 4 // settings in (a 4-byte length, then shared.BoxInit), error text out; closed when the watcher runs
	ReexecFD   = 5 // stage 2 of an unprivileged box: the settings again, from a pipe
	FirstExtra = 6 // the first of the cgroup files and trees
)

// MaxSettings bounds the settings.
const MaxSettings = 1 << 20

// Requested reports whether argv (os.Args) asks for the init stage.
func Requested(argv []string) bool {
	return len(argv) > 1 && (argv[len(argv)-1] == Arg || argv[len(argv)-1] == stage2Arg)
}

// Main is the init stage (see Arg). When the box is built it returns
// the watcher's arguments (without the program name) and 0: the caller
// runs the watcher in this process, PID 1 of the box. Otherwise it
// returns the exit status, after writing one line about the failure to
// the settings descriptor.
func Main(argv []string) ([]string, int) {
	var st unix.Stat_t
	if err := unix.Fstat(SettingsFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		os.Stderr.WriteString("watcher: " + Arg + " is the native runtime's internal init stage; it is not run by hand\n")
		return nil, shared.ExitUsage
	}
	unix.CloseOnExec(SettingsFD)
	fail := func(err error) ([]string, int) {
		unix.Write(SettingsFD, []byte(err.Error()))
		return nil, shared.ExitSetupFailed
	}
	stage2 := argv[len(argv)-1] == stage2Arg
	in := SettingsFD
	if stage2 {
		in = ReexecFD
	}
	b, err := ReadSettings(in)
	if err != nil {
		if errors.Is(err, errNoSettings) {
			return nil, shared.ExitSetupFailed // the supervisor went away before sending settings
		}
		return fail(errorf("read box settings: %w", err))
	}
	if stage2 {
		unix.Close(ReexecFD)
	}
	c, err := shared.ParseBoxInit(b)
	if err != nil {
		return fail(err)
	}
	if c.Reexec && !stage2 {
		return fail(reexec(b, argv))
	}
	if err := apply(c); err != nil {
		return fail(err)
	}
	// The box is built. Its PID 1 was exec'd as /proc/self/fd/N, so it
	// is named "N": name it watcher, as an exec of the watcher would (ps,
	// pgrep; the kernel's process events see the change, which marks
	// the end of the stage for the launch timeline). The threads the Go
	// runtime started before keep "N" (renaming each costs a stop of
	// the world).
	if fd, err := unix.Open("/proc/self/comm", unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
		unix.Write(fd, []byte("watcher"))
		unix.Close(fd)
	}
	// EOF on the settings descriptor tells the supervisor the watcher
	// runs.
	unix.Close(SettingsFD)
	if len(c.Argv) == 0 {
		return nil, shared.ExitSetupFailed
	}
	return c.Argv[1:], 0
}

var errNoSettings = errors.New("no settings")

// WriteSettings frames b for ReadSettings.
func WriteSettings(b []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// ReadSettings reads one framed settings value from fd (blocking).
func ReadSettings(fd int) ([]byte, error) {
	var hdr [4]byte
	if err := readFull(fd, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxSettings {
		return nil, errorf("settings of %d bytes (at most %d)", n, MaxSettings)
	}
	b := make([]byte, n)
	if err := readFull(fd, b); err != nil {
		if errors.Is(err, errNoSettings) {
			return nil, errorf("settings cut short")
		}
		return nil, err
	}
	return b, nil
}

func readFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Read(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("read", err)
		}
		if n == 0 {
			return errNoSettings
		}
		b = b[n:]
	}
	return nil
}

// reexec runs the init stage again with the settings on a pipe. A
// process that entered a user namespace before its uid map was written
// holds no capabilities there; an exec as the mapped root grants them.
func reexec(settings []byte, argv []string) error {
	b := WriteSettings(settings)
	if len(b) > 60<<10 {
		return errorf("box settings of %d bytes do not fit a pipe", len(b))
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return os.NewSyscallError("pipe2", err)
	}
	if _, err := unix.Write(p[1], b); err != nil {
		return os.NewSyscallError("write settings pipe", err)
	}
	unix.Close(p[1])
	// The read end as ReexecFD, open across the exec (dup2 of a
	// descriptor onto itself is an error with dup3).
	if p[0] == ReexecFD {
		if _, err := unix.FcntlInt(ReexecFD, unix.F_SETFD, 0); err != nil {
			return os.NewSyscallError("fcntl(F_SETFD)", err)
		}
	} else if err := unix.Dup2(p[0], ReexecFD); err != nil {
		return os.NewSyscallError("dup2 settings pipe", err)
	}
	// The status descriptor must survive this exec (EOF on it means the
	// watcher runs); stage 2 sets close-on-exec again.
	if _, err := unix.FcntlInt(SettingsFD, unix.F_SETFD, 0); err != nil {
		return os.NewSyscallError("fcntl(F_SETFD)", err)
	}
	if err := unix.Setresuid(0, 0, 0); err != nil {
		return step0("become root in the user namespace: %w (is the uid map written?)", "setresuid", err)
	}
	args := append(append([]string(nil), argv[:len(argv)-1]...), stage2Arg)
	err := unix.Exec("/proc/self/exe", args, os.Environ())
	return step0("re-exec init stage: %w", "execve /proc/self/exe", err)
}

// joinCgroup moves the process into the box cgroup (v1: one tasks file
// per controller; v2 is born there) and gives it a cgroup namespace
// rooted there (the agent sees "/agent" in /proc/self/cgroup, not the
// host's layout); on v2 it then moves into the agent's folder below
// the namespace's root (c.CgroupMoveFD). When the
// stage goes on as the watcher, every thread moves itself and joins the
// one new namespace (both are per thread); before an exec, the exec'ing
// thread alone, which is the whole process after the exec.
func joinCgroup(c shared.BoxInit, allThreads bool) error {
	runtime.LockOSThread()
	zero := []byte("0")
	for i, fd := range c.CgroupTaskFDs {
		var err error
		if allThreads {
			_, _, e := syscall.AllThreadsSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&zero[0])), 1)
			if e != 0 {
				err = e
			}
		} else {
			_, err = unix.Write(fd, zero)
		}
		if err != nil {
			return step1("join the box cgroup (%s): %w", c.CgroupTasks[i], "write", err)
		}
		unix.Close(fd)
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return step0("new cgroup namespace: %w", "unshare", err)
	}
	if allThreads {
		defer runtime.UnlockOSThread()
		ns, err := unix.Open("/proc/thread-self/ns/cgroup", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return step0("new cgroup namespace: %w", "open", err)
		}
		defer unix.Close(ns)
		if _, _, e := syscall.AllThreadsSyscall(unix.SYS_SETNS, uintptr(ns), unix.CLONE_NEWCGROUP, 0); e != 0 {
			return step0("new cgroup namespace: %w", "setns", e)
		}
	}
	if c.CgroupMoveFD > 0 {
		// v2: the whole process leaves the namespace's root for the
		// agent's folder ("0" is the writer's thread group), checked
		// against the supervisor's credentials, which opened the file.
		if _, err := unix.Write(c.CgroupMoveFD, zero); err != nil {
			return step1("move into the box's agent cgroup (%s): %w", c.CgroupMove, "write", err)
		}
		unix.Close(c.CgroupMoveFD)
	}
	return nil
}

// staging is where the new root is attached before pivot_root. Every
// host path is resolved (opened) before it is covered.
const staging = "/tmp"

// minRootFS are the options of the minimal root's tmpfs: folders, mount
// points and links only.
const minRootFS = "mode=0755,size=1m,nr_inodes=4096"

// apply builds the box's file system and joins the box cgroup; in an
// unprivileged box (c.Reexec) it then execs the watcher, else it
// returns and the caller goes on as the watcher. It runs in the new
// mount namespace as its init; the namespace dies with it, so a failure
// half way leaves nothing on the host.
//
// Nothing here follows a path string a box could have changed: host
// sources are opened with openat2(RESOLVE_NO_SYMLINKS) and cloned by
// descriptor; every target is resolved beneath the new root with
// openat2(RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS) and mounted on through
// its descriptor (move_mount, or /proc/self/fd/N).
func apply(c shared.BoxInit) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return step0("make mounts private: %w", "mount", err)
	}
	for _, fd := range append(c.CgroupTaskFDs, c.CgroupMoveFD) {
		if fd > 0 {
			unix.CloseOnExec(fd)
		}
	}
	// Open every host path first: detached copies of their mounts.
	trees := map[int]int{}
	for i, op := range c.Ops {
		if op.Op != "bind" {
			continue
		}
		if op.TreeFD > 0 {
			// Never left open for the watcher: each tree is closed once
			// it is attached, and a failed step ends the stage.
			trees[i] = op.TreeFD
			continue
		}
		fd, err := CloneTree(op.Source, TreeAttr(op.ReadOnly, op.Flags))
		if err != nil {
			return err
		}
		trees[i] = fd
	}
	if c.Root == "" {
		if err := unix.Mount("tmpfs", staging, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, minRootFS); err != nil {
			return step0("mount the box's root: %w", "mount", err)
		}
	} else {
		rootFD := c.RootFD
		if rootFD > 0 {
			unix.CloseOnExec(rootFD)
		} else {
			var err error
			if rootFD, err = CloneTree(c.Root, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
				return errorf("root: %w", err)
			}
		}
		if err := unix.MoveMount(rootFD, "", unix.AT_FDCWD, staging, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return step1("attach root %s: %w", c.Root, "move_mount", err)
		}
		unix.Close(rootFD)
	}
	root, err := unix.Open(staging, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return step0("open the new root: %w", "open", err)
	}
	defer unix.Close(root)
	// Modes as the steps name them, without a chmod after each create;
	// the watcher and the agent get the umask they were given.
	defer unix.Umask(unix.Umask(0))
	b := &builder{root: root}
	defer b.close()
	for i, op := range c.Ops {
		if err := b.apply(op, trees[i]); err != nil {
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
			return step1("set hostname %q: %w", c.Hostname, "sethostname", err)
		}
	}
	if err := unix.Fchdir(root); err != nil {
		return step0("enter new root: %w", "fchdir", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return step0("pivot to new root: %w", "pivot_root", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return step0("detach old root: %w", "umount2", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return os.NewSyscallError("chdir /", err)
	}
	if !c.CgroupNSDone {
		if err := joinCgroup(c, !c.Reexec); err != nil {
			return err
		}
	}
	if !c.Reexec {
		return nil // the watcher runs in this process
	}
	err = unix.Exec(c.Exec, c.Argv, c.Env)
	return step1("exec watcher %s in the box: %w", c.Exec, "execve", err)
}

// loopbackUp brings lo up in the box's network namespace: two ioctls on
// a datagram socket (the netlink library took two netlink round trips
// and its own package start).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return step0("bring lo up: %w", "socket", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return errorf("bring lo up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return step0("find lo in the box's network namespace: %w", "ioctl(SIOCGIFFLAGS)", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return step0("bring lo up: %w", "ioctl(SIOCSIFFLAGS)", err)
	}
	return nil
}

// OpenHostSource opens a host path for a bind mount without following
// any symlink on the way: a link in a folder a box could write (a
// previous box's --mount) must never redirect the next box's mount.
func OpenHostSource(p string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == unix.ELOOP {
		return -1, errorf("mount source %s passes through a symlink: refused (a link could have been planted there); name the real path", p)
	}
	if err != nil {
		return -1, step1("open mount source %s: %w", p, "openat2", err)
	}
	return fd, nil
}

// TreeAttr are the mount attributes (MOUNT_ATTR_*) of a bind step's
// tree: read-only when asked, nosuid and nodev when its flags
// (MS_NOSUID, MS_NODEV) say so.
func TreeAttr(readOnly bool, flags uintptr) uint64 {
	var a uint64
	if readOnly {
		a |= unix.MOUNT_ATTR_RDONLY
	}
	if flags&unix.MS_NOSUID != 0 {
		a |= unix.MOUNT_ATTR_NOSUID
	}
	if flags&unix.MS_NODEV != 0 {
		a |= unix.MOUNT_ATTR_NODEV
	}
	return a
}

// CloneTree returns a detached copy of the mounts at host path p with
// the attributes set (recursively; see TreeAttr).
func CloneTree(p string, set uint64) (int, error) {
	src, err := OpenHostSource(p)
	if err != nil {
		return -1, err
	}
	defer unix.Close(src)
	fd, err := cloneAt(src, set)
	if err != nil {
		return -1, errorf("open %s for a bind mount: %w", p, err)
	}
	return fd, nil
}

// cloneAt returns a detached, private copy of the mounts at the open
// descriptor src with the attributes set (recursively): open_tree_attr
// (Linux 6.15), the clone and SetTreeAttr in one call and one walk of
// the copy (a native box clones some 35 trees). On any error (an older
// kernel, a seccomp filter that does not know the call) it takes the
// two calls, whose error says which step failed.
func cloneAt(src int, set uint64) (int, error) {
	const flags = unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_RECURSIVE | unix.AT_EMPTY_PATH
	attr := unix.MountAttr{Propagation: unix.MS_PRIVATE, Attr_set: set}
	fd, _, e := unix.Syscall6(unix.SYS_OPEN_TREE_ATTR, uintptr(src), uintptr(unsafe.Pointer(&emptyPath[0])), flags,
		uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e == 0 {
		return int(fd), nil
	}
	tree, err := unix.OpenTree(src, "", flags)
	if err != nil {
		return -1, os.NewSyscallError("open_tree", err)
	}
	if err := SetTreeAttr(tree, set, -1); err != nil {
		unix.Close(tree)
		return -1, err
	}
	return tree, nil
}

// emptyPath is "" for a syscall that takes a path (AT_EMPTY_PATH).
var emptyPath = [1]byte{0}

// SetTreeAttr makes a detached tree private with the attributes set
// (MOUNT_ATTR_*, recursively), and idmapped through the user namespace
// userns when that is not -1.
func SetTreeAttr(fd int, set uint64, userns int) error {
	attr := unix.MountAttr{Propagation: unix.MS_PRIVATE, Attr_set: set}
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
		return -1, errorf("%s passes through a symlink in the box: refused (a link could have been planted there); name the real path", target)
	}
	if err != nil {
		return -1, &os.PathError{Op: "openat2", Path: target, Err: err}
	}
	return fd, nil
}

// fdPath names an open descriptor for calls that take only a path.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// bindTarget opens a bind mount's target beneath the new root, creating
// it (and its parents) with the type of its source when asked: possible
// only below a writable part of the box, such as /tmp or the minimal
// root. No part of the way may be a symlink. (The builder makes a name
// whose folder is there itself: this walk is for the rest.)
func bindTarget(root int, op shared.FsOp, tree int) (int, error) {
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
		return -1, step1("mount source %s: %w", op.Source, "fstat", err)
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
// creating it first when missing: a folder, or an empty file. The
// create comes first (bindTarget calls it for a name it did not find):
// on a name that exists it fails with EEXIST, before any permission or
// read-only check, and the open below finds what is there (a symlink
// is refused there); a lookup first would cost one more walk a name.
func makeIn(dir int, name string, folder bool) (int, error) {
	var err error
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
		return errorf("mount target %s does not exist in the box's read-only root; pick a target that exists there, or one below /tmp", target)
	}
	return errorf("create mount target %s: %w", target, err)
}

// step1 and step2 are errorf for a step's error, with one or two
// names, wrapping err as the failure of the syscall call (unless ""):
// one call each instead of an argument list at each of the builder's
// failures, which made up most of its code.
//
//go:noinline
func step1(format, a, call string, err error) error {
	if call != "" {
		err = os.NewSyscallError(call, err)
	}
	return errorf(format, a, err)
}

//go:noinline
func step2(format, a, b, call string, err error) error {
	if call != "" {
		err = os.NewSyscallError(call, err)
	}
	return errorf(format, a, b, err)
}

// step0 is errorf(format, the failure of the syscall call): one call
// at each failure instead of building an argument list there.
//
//go:noinline
func step0(format, call string, err error) error {
	return errorf(format, os.NewSyscallError(call, err))
}

// errorf is fmt.Errorf for the verbs used here (%s %q %d, and %w,
// which it wraps): fmt's printing by reflection would add a tenth to
// the watcher binary.
func errorf(format string, args ...any) error {
	var b []byte
	var wrapped error
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) || len(args) == 0 {
			b = append(b, format[i])
			continue
		}
		i++
		a := args[0]
		args = args[1:]
		switch format[i] {
		case 'q':
			b = strconv.AppendQuote(b, text(a))
		case 'w':
			wrapped, _ = a.(error)
			b = append(b, text(a)...)
		default:
			b = append(b, text(a)...)
		}
	}
	return &stageError{msg: string(b), err: wrapped}
}

func text(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case error:
		return v.Error()
	case int:
		return strconv.Itoa(v)
	case uint32:
		return strconv.FormatUint(uint64(v), 10)
	}
	return "?"
}

type stageError struct {
	msg string
	err error
}

func (e *stageError) Error() string { return e.msg }
func (e *stageError) Unwrap() error { return e.err }
