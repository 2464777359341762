package watcher

import (
	"os"
	"unsafe"

	"deathwatch/shared/seccomp"
	"golang.org/x/sys/unix"
)

// installFilter puts the spec's syscall filter on the calling thread
// only (no SECCOMP_FILTER_FLAG_TSYNC): the agent forked from it
// inherits the filter, the watcher's other threads never see it. It
// must be called with the OS thread locked, after no_new_privs.
func installFilter(prog []seccomp.Insn) error {
	filter := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filter[i] = unix.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return os.NewSyscallError("seccomp(SECCOMP_SET_MODE_FILTER)", e)
	}
	return nil
}
