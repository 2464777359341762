package docker

import (
	"net"

	"golang.org/x/sys/unix"
)

// socketOwner is the uid and pid of the process that listens on the
// unix socket at path (SO_PEERCRED: the listener's credentials, taken
// when it called listen; systemd's, for a socket it activates; pid 0
// when it is not in this pid namespace), or false when they cannot be
// read.
func socketOwner(path string) (uid, pid int, ok bool) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return 0, 0, false
	}
	defer c.Close()
	return connPeer(c)
}

// connPeer is socketOwner read from a connection already made to the
// socket.
func connPeer(c net.Conn) (uid, pid int, ok bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, 0, false
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return 0, 0, false
	}
	return int(cred.Uid), int(cred.Pid), true
}
