package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"deathwatch/shared/landlock"
	"deathwatch/shared/seccomp"
)

// kernelFeature is one kernel feature a native box uses: the first
// Linux release that has it, and either what a box does without it
// (Without) or nothing, when no box is made without it: the runtime is
// then not usable on that kernel (doctor says so, --runtime auto passes
// it by, --runtime native is refused with what is missing).
type kernelFeature struct {
	Name    string
	Since   string // "5.12"
	Without string // "": required
	// OnlyV2: needed only where box cgroups are on cgroup v2.
	OnlyV2 bool
}

// kernelFeatures are the native runtime's kernel features. Every one
// is probed by a call that tells a missing system call (ENOSYS) or
// file from a present one, never by the release number, which
// distributions' backports make a poor guide.
var kernelFeatures = []kernelFeature{
	{Name: "user namespaces", Since: "3.8"},
	{Name: "seccomp SECCOMP_RET_KILL_PROCESS", Since: "4.14"},
	{Name: "open_tree and move_mount", Since: "5.2"},
	{Name: "pidfd_open", Since: "5.3", Without: "the supervisor watches its controller with PR_SET_PDEATHSIG, which fires when the parent thread that started it exits, not only the process"},
	{Name: "openat2 RESOLVE_IN_ROOT", Since: "5.6"},
	{Name: "clone3 CLONE_INTO_CGROUP", Since: "5.7", OnlyV2: true},
	// Read-only, nosuid and nodev binds are set on detached trees
	// recursively (AT_RECURSIVE): a plain MS_BIND|MS_REMOUNT|MS_RDONLY
	// leaves the submounts of /usr and of a --mount writable.
	{Name: "mount_setattr", Since: "5.12"},
	{Name: "Landlock", Since: "5.13", Without: "no Landlock layer: abstract unix sockets and signals are not scoped to the box (the scopes need ABI 6, Linux 6.12)"},
	{Name: "cgroup.kill", Since: "5.14", OnlyV2: true, Without: "a box's cgroup is emptied by freezing it, killing every process and thawing it (cgroup.freeze)"},
}

// kernelProbe says whether this kernel has a feature of kernelFeatures
// (nil) or why not.
type kernelProbe func(name string) error

// kernelCheck is what a kernel lacks: the required features (the
// runtime is not usable) and the optional ones (what boxes do
// without them), each as one line that names the feature and its
// minimum release.
type kernelCheck struct {
	Missing  []string
	Degraded []string
}

// checkKernel runs probe over kernelFeatures. Pure: tested with faked
// kernels.
func checkKernel(v2 bool, probe kernelProbe) kernelCheck {
	var c kernelCheck
	for _, f := range kernelFeatures {
		if f.OnlyV2 && !v2 {
			continue
		}
		err := probe(f.Name)
		if err == nil {
			continue
		}
		line := fmt.Sprintf("%s (Linux %s+) is missing: %v", f.Name, f.Since, err)
		if f.Without == "" {
			c.Missing = append(c.Missing, line)
		} else {
			c.Degraded = append(c.Degraded, line+"; "+f.Without)
		}
	}
	return c
}

// refusal is the one line that says the native runtime cannot make a
// box on this kernel, or "".
func (c kernelCheck) refusal(release string) string {
	if len(c.Missing) == 0 {
		return ""
	}
	return fmt.Sprintf("kernel %s cannot make native boxes with their walls: %s; use a newer kernel, or --runtime docker or podman", release, strings.Join(c.Missing, "; "))
}

// hostKernelProbe probes the running kernel; cgroupRoot is the v2 mount
// the boxes' cgroups are on.
func hostKernelProbe(cgroupRoot string) kernelProbe {
	return func(name string) error {
		switch name {
		case "user namespaces":
			if _, err := os.Stat("/proc/self/ns/user"); err != nil {
				return err
			}
			return nil
		case "seccomp SECCOMP_RET_KILL_PROCESS":
			action := uint32(seccomp.RetKill)
			_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
			return errnoOf("seccomp(SECCOMP_GET_ACTION_AVAIL)", e)
		case "open_tree and move_mount":
			// A bad descriptor: EBADF where the call exists.
			_, err := unix.OpenTree(-1, "", unix.AT_EMPTY_PATH)
			return absent("open_tree", err, unix.EBADF)
		case "pidfd_open":
			fd, err := unix.PidfdOpen(os.Getpid(), 0)
			if err == nil {
				unix.Close(fd)
			}
			return absent("pidfd_open", err)
		case "openat2 RESOLVE_IN_ROOT":
			fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
			if err == nil {
				unix.Close(fd)
			}
			return absent("openat2", err)
		case "clone3 CLONE_INTO_CGROUP":
			return probeCloneIntoCgroup()
		case "mount_setattr":
			_, _, e := unix.Syscall6(unix.SYS_MOUNT_SETATTR, ^uintptr(0), 0, unix.AT_EMPTY_PATH, 0, 0, 0)
			return absent("mount_setattr", errnoOf("", e), unix.EBADF, unix.EINVAL)
		case "Landlock":
			_, err := landlock.ABI()
			return err
		case "cgroup.kill":
			return probeCgroupKill(cgroupRoot)
		}
		return fmt.Errorf("no probe for %s", name)
	}
}

// errnoOf is e as an error (nil for 0).
func errnoOf(call string, e unix.Errno) error {
	if e == 0 {
		return nil
	}
	if call == "" {
		return e
	}
	return os.NewSyscallError(call, e)
}

// absent is nil when err says the system call exists (nil, or one of
// present), else err: ENOSYS or a refusal of its own.
func absent(call string, err error, present ...unix.Errno) error {
	if err == nil {
		return nil
	}
	for _, p := range present {
		if errors.Is(err, p) {
			return nil
		}
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return err
	}
	return os.NewSyscallError(call, err)
}

// cloneArgs is struct clone_args up to its cgroup field (88 bytes,
// CLONE_ARGS_SIZE_VER2).
type cloneArgs struct {
	Flags, Pidfd, ChildTID, ParentTID, ExitSignal, Stack, StackSize, TLS, SetTID, SetTIDSize, Cgroup uint64
}

// probeCloneIntoCgroup asks clone3 for CLONE_INTO_CGROUP with a
// descriptor that is not open: Linux 5.7+ answers EBADF before any
// child exists; older kernels refuse the flag or the size (EINVAL,
// E2BIG), or have no clone3 (ENOSYS).
func probeCloneIntoCgroup() error {
	const cloneIntoCgroup = 0x200000000
	args := cloneArgs{Flags: cloneIntoCgroup, ExitSignal: uint64(unix.SIGCHLD), Cgroup: 1<<31 - 1}
	r, _, e := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args), 0)
	switch {
	case e == unix.EBADF:
		return nil
	case e == 0 && r == 0:
		unix.Exit(127) // unreachable: the descriptor is never open
	case e == 0:
		return fmt.Errorf("clone3 started pid %d into a cgroup descriptor that is not open", r)
	}
	return os.NewSyscallError("clone3(CLONE_INTO_CGROUP)", e)
}

// probeCgroupKill looks for cgroup.kill in the supervisor's own v2
// cgroup, or in a folder below the root when the supervisor runs in the
// root cgroup (which has none).
func probeCgroupKill(root string) error {
	self, err := selfCgroupV2()
	if err != nil {
		return err
	}
	dir := filepath.Join(root, self)
	if self == "/" {
		es, err := os.ReadDir(root)
		if err != nil {
			return err
		}
		dir = ""
		for _, e := range es {
			if e.IsDir() {
				dir = filepath.Join(root, e.Name())
				break
			}
		}
		if dir == "" {
			// Nothing to look in (a host whose init made no cgroup):
			// only here the release stands in for a probe.
			if releaseAtLeast(kernelRelease(), 5, 14) {
				return nil
			}
			return errors.New("no cgroup below the root cgroup to look for cgroup.kill in, and the release is before 5.14")
		}
	}
	_, err = os.Stat(filepath.Join(dir, "cgroup.kill"))
	return err
}

// kernelRelease is uname's release ("6.1.0-28-amd64"), or "" when uname fails.
func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// releaseAtLeast reports whether a uname release ("6.1.0-28-amd64") is
// major.minor or later.
func releaseAtLeast(release string, major, minor int) bool {
	a, rest, _ := strings.Cut(release, ".")
	b, _, _ := strings.Cut(rest, ".")
	if i := strings.IndexFunc(b, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		b = b[:i] // "15rc1"
	}
	ma, err1 := strconv.Atoi(a)
	mi, err2 := strconv.Atoi(b)
	return err1 == nil && err2 == nil && (ma > major || ma == major && mi >= minor)
}
