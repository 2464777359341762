//go:build !linux

package proc

import (
	"errors"
	"fmt"
)

// SelfPIDNamespace is 0: no PID namespaces outside Linux.
func SelfPIDNamespace() uint64 { return 0 }

// Tree is nil outside Linux: the host cannot see a box's processes
// (they run in Docker Desktop's or sbx's VM).
func Tree(int) []Proc { return nil }

// Children is nil outside Linux.
func Children(int) []int { return nil }

// PIDNamespace is not known outside Linux.
func PIDNamespace(pid int) (string, error) {
	return "", fmt.Errorf("pid namespace of %d: %w", pid, errors.ErrUnsupported)
}

// InNamespace is nil outside Linux.
func InNamespace(string) []Proc { return nil }
