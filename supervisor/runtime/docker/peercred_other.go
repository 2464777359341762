//go:build !linux

package docker

import "net"

// socketOwner cannot be read here: the engine's own answer serves
// (on macOS the socket is a forwarder's, not the engine's).
func socketOwner(path string) (uid, pid int, ok bool) { return 0, 0, false }

func connPeer(c net.Conn) (uid, pid int, ok bool) { return 0, 0, false }
