//go:build !linux

package docker

import "errors"

var errNotSame = errors.New("the engine's daemon sees another file there")

// sameFileAs cannot look into another process's root here: the daemon
// is in a VM (Docker Desktop), where the nonce probe decides.
func sameFileAs(pid int, path string) error { return errors.ErrUnsupported }
