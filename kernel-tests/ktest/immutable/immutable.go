//go:build linux

// Package immutable sets and clears a file's immutable attribute
// (FS_IMMUTABLE_FL, what chattr +i sets): nobody, root included, can
// unlink or change such a file until it is cleared. Setting it takes
// CAP_LINUX_IMMUTABLE and a file system that keeps the flag.
package immutable

import (
	"os"

	"golang.org/x/sys/unix"
)

// flag is linux/fs.h's FS_IMMUTABLE_FL (x/sys names the ioctls, not the
// flag).
const flag = 0x10

// Set turns path's immutable attribute on or off.
func Set(path string, on bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	if on {
		flags |= flag
	} else {
		flags &^= flag
	}
	return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, flags)
}
