package watcher

import (
	"errors"
	"os"
	"strconv"
	"unsafe"

	"deathwatch/shared/landlock"
	"golang.org/x/sys/unix"
)

// agentScopes are what the agent's Landlock domain scopes: the agent
// can neither connect to an abstract unix socket nor signal a process
// made outside the domain — the watcher, a process an engine's exec put
// in the box, and with --network host the host's abstract sockets (X11,
// D-Bus, containerd). Its own processes it reaches as before.
const agentScopes = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL

// scopeThread puts the calling thread in a new Landlock domain with
// agentScopes; the agent forked from it inherits the domain, the
// watcher's other threads stay out. A kernel below landlock.ScopeABI
// (or without Landlock) loses only this layer, which doctor reports;
// a kernel that has the ABI and refuses the domain is a failed setup.
// It must be called with the OS thread locked, after no_new_privs.
func scopeThread() error {
	abi, err := landlock.ABI()
	switch {
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		return nil // no Landlock in this kernel
	case err != nil:
		// A kernel with Landlock whose call the box's own seccomp
		// profile (the engine's) refuses: said, as doctor cannot see it.
		logf("the agent runs without its Landlock scopes: " + err.Error() + " (a seccomp profile around the box refuses the call)")
		return nil
	case abi < landlock.ScopeABI:
		return nil
	}
	// Only the fields up to scoped: an older kernel refuses a longer
	// struct whose tail it does not know unless that tail is zero, and
	// this one has no use for the tail.
	attr := unix.LandlockRulesetAttr{Scoped: agentScopes}
	size := unsafe.Offsetof(attr.Scoped) + unsafe.Sizeof(attr.Scoped)
	fd, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return os.NewSyscallError("landlock_create_ruleset (ABI "+strconv.Itoa(abi)+")", e)
	}
	defer unix.Close(int(fd))
	if _, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		return os.NewSyscallError("landlock_restrict_self", e)
	}
	return nil
}
