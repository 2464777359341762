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
func joinNewSessionKeyring() error {
	// A NULL name: a new anonymous keyring, never one found by name.
	if _, _, e := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); e != 0 {
		return os.NewSyscallError("keyctl(KEYCTL_JOIN_SESSION_KEYRING)", e)
	}
	return nil
}
