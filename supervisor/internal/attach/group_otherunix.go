//go:build unix && !linux

package attach

import "syscall"

// dieWithParent does nothing where there is no parent-death signal: an
// orphaned engine client finishes its call, and the box it made sees
// its stdin end with it.
func dieWithParent(*syscall.SysProcAttr) {}
