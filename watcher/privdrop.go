package watcher

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dropSelf makes the watcher id, keeping only CAP_KILL (to signal the
// agent's processes, which run as another uid). Credentials and
// capabilities are per thread in Linux, so every call here goes to all
// of the process's threads (syscall.AllThreadsSyscall; cgo is off).
//
// The watcher's bounding set is left alone: it limits only what an
// execve may grant, the watcher never executes anything again, and
// no_new_privs already forbids any gain. Emptying it would take one
// all-thread round trip per capability, on the launch's path.
//
// keep are more capabilities left permitted, not effective (copy.go's
// exportCaps: to read the agent's files once it is dead).
func dropSelf(id ID, keep uint32) error {
	all := func(name string, trap, a1, a2, a3 uintptr) error {
		if _, _, e := syscall.AllThreadsSyscall(trap, a1, a2, a3); e != 0 {
			return os.NewSyscallError(name, e)
		}
		return nil
	}
	if err := all("prctl(PR_SET_NO_NEW_PRIVS)", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return err
	}
	if err := all("prctl(PR_SET_KEEPCAPS)", unix.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 1, 0); err != nil {
		return err
	}
	// Every thread has the same groups (only all-thread calls change
	// them), so this thread's say whether there are any to clear: most
	// often none (the native stage is cloned with none), and each
	// all-thread call is a round trip to every thread.
	if groups, err := syscall.Getgroups(); err != nil || len(groups) > 0 {
		if err := syscall.Setgroups(nil); err != nil {
			return os.NewSyscallError("setgroups", err)
		}
	}
	if err := syscall.Setresgid(int(id.GID), int(id.GID), int(id.GID)); err != nil {
		return os.NewSyscallError("setresgid", err)
	}
	if err := syscall.Setresuid(int(id.UID), int(id.UID), int(id.UID)); err != nil {
		return os.NewSyscallError("setresuid", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	data[0].Effective = 1 << unix.CAP_KILL
	data[0].Permitted = 1<<unix.CAP_KILL | keep
	err := all("capset", unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	if err != nil {
		return err
	}
	return all("prctl(PR_SET_KEEPCAPS)", unix.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 0, 0)
}
