package landlock

import (
	"os"

	"golang.org/x/sys/unix"
)

// ABI is the kernel's Landlock ABI version; an error when the kernel
// has none (ENOSYS: not built in; EOPNOTSUPP: not enabled at boot,
// the lsm= list).
func ABI() (int, error) {
	v, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0, os.NewSyscallError("landlock_create_ruleset(LANDLOCK_CREATE_RULESET_VERSION)", e)
	}
	return int(v), nil
}
