package shared

import (
	"os"

	"golang.org/x/sys/unix"
)

// The watcher lists and removes folders with these rather than os's
// Readdirnames and RemoveAll: os serves names and os.FileInfo from one
// readdir, and a FileInfo carries a time.Time, which links the time
// zone loader and time formatting into the PID-1 binary (35 KB of it,
// all resident: the kernel maps a small binary in whole).

// ReadDirNames lists the folder p, but . and .., unsorted.
func ReadDirNames(p string) ([]string, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readDirNames(fd)
}

// readDirNames lists the open folder fd from its offset on.
func readDirNames(fd int) ([]string, error) {
	var names []string
	buf := make([]byte, 8<<10)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return names, err
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// RemoveAll removes p and everything beneath it, as os.RemoveAll does
// (a p that does not exist is no error), following no symlink: each
// folder is opened beneath its parent's descriptor with O_NOFOLLOW.
func RemoveAll(p string) error {
	err := unix.Unlink(p)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	dir, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	err = removeBelow(dir)
	unix.Close(dir)
	if err != nil {
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	if err := unix.Rmdir(p); err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	return nil
}

// removeBelow empties the open folder dir.
func removeBelow(dir int) error {
	names, err := readDirNames(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		err := unix.Unlinkat(dir, n, 0)
		if err == nil || err == unix.ENOENT {
			continue
		}
		sub, oerr := unix.Openat(dir, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if oerr != nil {
			return err
		}
		err = removeBelow(sub)
		unix.Close(sub)
		if err != nil {
			return err
		}
		if err := unix.Unlinkat(dir, n, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
			return err
		}
	}
	return nil
}
