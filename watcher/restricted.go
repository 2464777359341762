package watcher

// Restricted mode (--restricted): a box whose container may hold no
// capability and must run as a non-root uid (Kubernetes Pod Security
// restricted), so the watcher cannot give the agent another uid. The
// agent then runs at the watcher's own uid, and other walls stand in
// for the uid boundary: PID 1 is not dumpable (ptrace, process_vm_*,
// pidfd_getfd and /proc/1/* check that), Landlock's signal scope keeps
// the agent's signals from PID 1, and a seccomp wall (seccomp.PidWall)
// lets the calls that act on another process of the same uid without
// those checks act on the caller alone. A kernel that lacks any of them
// refuses the box.

import (
	"errors"
	"os"
	"syscall"
	"unsafe"

	"deathwatch/shared"
	"deathwatch/shared/landlock"
	"golang.org/x/sys/unix"
)

// restrictedRefusal is the one line for a box restricted mode cannot
// wall in, or "" when it can: the watcher's ids (euid, egid), the
// spec's agent ids, the kernel's Landlock ABI (abiErr from its probe)
// and its seccomp filter support (seccompErr). Pure: table-tested.
func restrictedRefusal(euid, egid int, spec *shared.Spec, abi int, abiErr, seccompErr error) string {
	const mode = "--restricted (the agent shares the watcher's uid): "
	switch {
	case euid == 0:
		return mode + "the watcher runs as root, so the agent would too; run the box as a non-root uid (the pod's runAsUser)"
	case int(spec.UID) != euid || int(spec.GID) != egid:
		return mode + "the spec's agent ids " + itoa(int(spec.UID)) + ":" + itoa(int(spec.GID)) + " are not the watcher's " + itoa(euid) + ":" + itoa(egid) + "; run the box's container as the agent's ids (--user)"
	case abiErr != nil:
		return mode + "this kernel has no Landlock (" + abiErr.Error() + "), whose signal scope keeps the agent's signals from PID 1; run the box on a node with Linux 6.12 or later and landlock in its lsm= list"
	case abi < landlock.ScopeABI:
		return mode + "this kernel's Landlock is ABI " + itoa(abi) + ", without the signal scope (ABI " + itoa(landlock.ScopeABI) + ", Linux 6.12) that keeps the agent's signals from PID 1; run the box on a node with Linux 6.12 or later"
	case seccompErr != nil:
		return mode + "this kernel cannot filter the agent's syscalls (" + seccompErr.Error() + "), which keeps its prlimit, setpriority and sched_setaffinity off PID 1; run the box on a node whose kernel has seccomp filters"
	}
	return ""
}

// checkRestricted refuses a box restricted mode cannot wall in, then
// makes the watcher not dumpable, before the agent exists. It holds
// /proc/self/oom_score_adj open first: once the watcher is not
// dumpable, its /proc files are root's.
func checkRestricted(spec *shared.Spec) error {
	abi, abiErr := landlock.ABI()
	if msg := restrictedRefusal(os.Geteuid(), os.Getegid(), spec, abi, abiErr, seccompFilters()); msg != "" {
		return &refusedError{msg}
	}
	holdOOMScoreAdj()
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl(PR_SET_DUMPABLE, 0)", err)
	}
	return nil
}

// seccompFilters asks whether the kernel installs seccomp filters that
// return an errno (the wall's action): nil when it does.
func seccompFilters() error {
	action := uint32(unix.SECCOMP_RET_ERRNO)
	_, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
	if e != 0 {
		return os.NewSyscallError("seccomp(SECCOMP_GET_ACTION_AVAIL)", e)
	}
	return nil
}

// clearInheritedCaps empties the calling thread's ambient and
// inheritable sets, which is all an unprivileged thread can drop: the
// agent, exec'd at a non-root uid under no_new_privs, then starts with
// no capability. It must be called with the OS thread locked.
func clearInheritedCaps() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
		return os.NewSyscallError("prctl(PR_CAP_AMBIENT_CLEAR_ALL)", err)
	}
	return clearInheritable()
}
