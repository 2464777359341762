//go:build !linux

package trusted

import "os"

// ReplaceFile puts the file tmp in place of p, atomically (a rename).
func ReplaceFile(tmp, p string) error { return os.Rename(tmp, p) }
