package trusted

import (
	"os"

	"golang.org/x/sys/unix"
)

// ReplaceFile puts the file tmp in place of p, atomically: a reader
// (or a kill, or a power loss) sees the old p or the new one, never
// neither. When p exists the two are exchanged (renameat2
// RENAME_EXCHANGE) and tmp, now the old file, is unlinked: a rename
// over an existing file makes ext4 (auto_da_alloc) start the new
// file's writeback inside the rename, which the exchange and the
// unlink do not. A kill between the two leaves the
// old file under tmp's temporary name, which the readers of these folders
// skip; an error of that unlink is returned, p holding the new file.
// Where there is no p yet, or the file system cannot exchange, it is a
// plain rename.
func ReplaceFile(tmp, p string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, p, unix.RENAME_EXCHANGE)
	if err == nil {
		if err := unix.Unlink(tmp); err != nil && err != unix.ENOENT {
			return &os.PathError{Op: "unlink", Path: tmp, Err: err}
		}
		return nil
	}
	if err != unix.ENOENT && err != unix.EINVAL && err != unix.ENOSYS && err != unix.EOPNOTSUPP && err != unix.EXDEV {
		return &os.LinkError{Op: "renameat2", Old: tmp, New: p, Err: err}
	}
	return os.Rename(tmp, p)
}
