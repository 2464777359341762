package docker

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// errNotSame says that the daemon resolves a path to another file
// than this process does, or to none.
var errNotSame = errors.New("the engine's daemon sees another file there")

// sameFileAs reports whether the process pid resolves path (absolute)
// to the file this process resolves it to. It opens the path beneath
// the process's root (/proc/PID/root) by descriptor, every link inside
// resolved against that root: what a bind mount made by that process
// would take. errNotSame: it resolves to another file or none; any
// other error: the process's root cannot be read (not ours to see).
func sameFileAs(pid int, path string) error {
	var here unix.Stat_t
	if err := unix.Stat(path, &here); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	root, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("open /proc/"+strconv.Itoa(pid)+"/root", err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return errNotSame
	}
	if err != nil {
		return os.NewSyscallError("openat2 "+path, err)
	}
	defer unix.Close(fd)
	var there unix.Stat_t
	if err := unix.Fstat(fd, &there); err != nil {
		return os.NewSyscallError("fstat "+path, err)
	}
	if here.Dev != there.Dev || here.Ino != there.Ino {
		return errNotSame
	}
	return nil
}
