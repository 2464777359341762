package trusted

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// CheckDir: Windows folders carry ACLs, not modes; the journal
// lives in the user's own profile.
func CheckDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	return nil
}

// EnsureDir creates dir and checks it with CheckDir.
func EnsureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return CheckDir(dir)
}

// ErrNotRegular is returned for a file that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ReadFile reads at most max bytes of a regular file.
func ReadFile(p string, max int64) ([]byte, error) {
	st, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", p, ErrNotRegular)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max+1))
}
