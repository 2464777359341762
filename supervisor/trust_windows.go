package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// CheckTrustedDir: Windows folders carry ACLs, not modes; the journal
// lives in the user's own profile.
func CheckTrustedDir(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	return nil
}

// EnsureTrustedDir creates dir and checks it with CheckTrustedDir.
func EnsureTrustedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return CheckTrustedDir(dir)
}

// ErrNotRegular is returned for a file that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ReadTrustedFile reads at most max bytes of a regular file.
func ReadTrustedFile(p string, max int64) ([]byte, error) {
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
