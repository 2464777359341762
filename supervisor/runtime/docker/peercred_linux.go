package docker

import (
	"net"

	"golang.org/x/sys/unix"
)

// socketOwnerUID is the uid of the process that listens on the unix
// socket at path (SO_PEERCRED: the listener's credentials, taken when it
// called listen; systemd's, for a socket it activates), or false when it
// cannot be read.
func socketOwnerUID(path string) (int, bool) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	return connPeerUID(c)
}

// connPeerUID is socketOwnerUID read from a connection already made to
// the socket.
func connPeerUID(c net.Conn) (int, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, false
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return 0, false
	}
	return int(cred.Uid), true
}
