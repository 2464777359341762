package watcher

import (
	"os"

	"golang.org/x/sys/unix"
)

// joinNewSessionKeyring gives the calling thread a new anonymous
// session keyring, which a child forked from it inherits: the agent
// never shares the controller's session keyring (a key the supervisor's
// session holds is out of its reach, and it cannot plant one there).
// The session keyring lives in the thread's credentials, so the rest
// of the watcher keeps its own. It must be called with the OS thread
// locked, before the syscall filter (which denies keyctl).
//
// A box whose runtime already denies keyctl (Docker's and Podman's
// default seccomp profiles do; the filters a process holds pass on to
// every child) has no keyring to protect: EPERM and ENOSYS are fine.
func joinNewSessionKeyring() error {
	// A NULL name: a new anonymous keyring, never one found by name.
	_, _, e := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
	switch e {
	case 0, unix.EPERM, unix.ENOSYS:
		return nil
	}
	return os.NewSyscallError("keyctl(KEYCTL_JOIN_SESSION_KEYRING)", e)
}
