//go:build unix

// Package trusted reads and writes the supervisor's own records (the
// journal, the native runtime's state, the id slots) in folders that
// nobody else can write. They are acted on (a pid is killed, a cgroup
// emptied) on the strength of what they say, so they are trusted only
// when nobody else could have written them:
//
//   - every folder from / down to the folder itself is owned by the
//     supervisor's euid or by root, and is not writable by group or
//     others, except a root-owned sticky folder (/tmp) above it, where
//     others cannot rename or remove what is ours;
//   - the folder itself is the euid's own, mode 0700 or narrower
//     writable;
//   - the files read from it are regular files, opened O_NOFOLLOW and
//     O_NONBLOCK (a FIFO never blocks a read), not symlinks.
package trusted

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CheckDir says why dir (which must exist) cannot be trusted,
// or nil.
func CheckDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	euid := uint32(os.Geteuid())
	var st unix.Stat_t
	if err := unix.Lstat(abs, &st); err != nil {
		return fmt.Errorf("%s: %w", abs, os.NewSyscallError("lstat", err))
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a folder (a symlink or file on the path to %s); name the real folder", abs, abs)
	case st.Uid != euid:
		return fmt.Errorf("%s is owned by uid %d, not by this supervisor (uid %d): anyone who owns it can plant entries; use a folder of your own", abs, st.Uid, euid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others (mode %#o): anyone who can write there can plant entries; chmod go-w it or use a folder of your own", abs, st.Mode&0o7777)
	}
	if abs == "/" {
		return nil
	}
	_, err = CheckFoldersAbove(abs, euid)
	return err
}

// CheckFoldersAbove says why the folders from / down to abs's parent
// would let someone other than uid euid or root swap an entry on the
// path to abs, or nil: each is owned by euid or root and writable by
// group or others only when it is a root-owned sticky folder (/tmp).
// sticky reports whether abs's parent is such a folder: then abs's own
// entry is safe only when euid or root owns abs.
func CheckFoldersAbove(abs string, euid uint32) (sticky bool, err error) {
	for p, first := filepath.Dir(abs), true; ; p, first = filepath.Dir(p), false {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return false, fmt.Errorf("%s: %w", p, os.NewSyscallError("lstat", err))
		}
		groupOther := st.Mode&0o022 != 0
		switch {
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return false, fmt.Errorf("%s is not a folder (a symlink or file on the path to %s); name the real folder", p, abs)
		case st.Uid != euid && st.Uid != 0:
			return false, fmt.Errorf("%s (on the path to %s) is owned by uid %d, neither this supervisor (uid %d) nor root: its owner can swap the folder below it", p, abs, st.Uid, euid)
		case groupOther && !(st.Uid == 0 && st.Mode&unix.S_ISVTX != 0):
			return false, fmt.Errorf("%s (on the path to %s) is writable by group or others (mode %#o) and not a root-owned sticky folder: others can swap the folder below it", p, abs, st.Mode&0o7777)
		}
		if first {
			sticky = groupOther
		}
		if p == "/" {
			return sticky, nil
		}
	}
}

// EnsureDir creates dir (0700, with missing parents) and checks
// it with CheckDir.
func EnsureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := CheckDir(dir); err != nil {
		return fmt.Errorf("untrusted folder: %w", err)
	}
	return nil
}

// ErrNotRegular is returned for a journal or state file that is a
// FIFO, a device, a socket or a symlink.
var ErrNotRegular = errors.New("not a regular file")

// ReadFile reads at most max bytes of a regular file, refusing a
// symlink (O_NOFOLLOW) or anything else that is not a regular file
// without blocking on it (O_NONBLOCK: a FIFO does not hang the read).
func ReadFile(p string, max int64) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err == unix.ELOOP {
		return nil, fmt.Errorf("%s: %w (a symlink)", p, ErrNotRegular)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: %w (mode %#o)", p, ErrNotRegular, st.Mode)
	}
	if st.Size > max {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a record may hold", p, st.Size, max)
	}
	return io.ReadAll(io.LimitReader(f, max+1))
}
