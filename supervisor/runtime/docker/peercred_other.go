//go:build !linux

package docker

import "net"

// socketOwnerUID cannot be read here: the engine's own answer serves
// (on macOS the socket is a forwarder's, not the engine's).
func socketOwnerUID(path string) (int, bool) { return 0, false }

func connPeerUID(c net.Conn) (int, bool) { return 0, false }
