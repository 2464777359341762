package landlock

import (
	"errors"
	"syscall"
	"testing"
)

// ABI is a version, or the kernel's word for no Landlock (ENOSYS: not
// built in, EOPNOTSUPP: not enabled), never another failure.
func TestABI(t *testing.T) {
	abi, err := ABI()
	switch {
	case err == nil && abi >= 1:
		t.Logf("Landlock ABI %d", abi)
	case errors.Is(err, syscall.ENOSYS), errors.Is(err, syscall.EOPNOTSUPP):
		t.Logf("no Landlock: %v", err)
	default:
		t.Fatalf("ABI() = %d, %v", abi, err)
	}
}
