package watcher

// The unix control mode (--control=unix:PATH): the control stream
// arrives over a pathname unix socket that the host reaches through a
// relay it runs in the box (watcher relay PATH, relay.go), so that the
// watcher's own stdout and stderr stay free for the box's log (a pod's
// `kubectl logs`). The socket takes exactly one connection, from a
// process of the watcher's own uid, before the agent exists: the
// listener is closed and unlinked at once, and a second connection
// already waiting is a liveness loss. The first frame must carry the
// box's nonce (--nonce).

import (
	"errors"
	"os"
	"path"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"deathwatch/shared"
	"golang.org/x/sys/unix"
)

// relayPID is the relay's pid, once its connection is accepted: the
// box's sweeps spare it (killAll), so that the exit record still gets
// out after the agent's tree is killed.
var relayPID atomic.Int32

// acceptControl makes the folder of socket p (0700; it must not exist),
// listens on p until until, takes one connection and closes, unlinks and
// removes all of it again. It returns the connected socket and the
// peer's pid.
func acceptControl(p string, until time.Time) (int, int, error) {
	dir := path.Dir(p)
	if err := unix.Mkdir(dir, 0o700); err != nil {
		return -1, 0, os.NewSyscallError("mkdir "+dir+" (the control socket's folder must not exist)", err)
	}
	defer unix.Rmdir(dir)
	ln, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, 0, os.NewSyscallError("socket(AF_UNIX)", err)
	}
	closeLn := func() {
		if ln >= 0 {
			unix.Close(ln)
			unix.Unlink(p)
			ln = -1
		}
	}
	defer closeLn()
	if err := sockCall(unix.SYS_BIND, ln, p); err != nil {
		unix.Close(ln)
		ln = -1
		return -1, 0, os.NewSyscallError("bind "+p, err)
	}
	if err := unix.Listen(ln, 2); err != nil {
		return -1, 0, os.NewSyscallError("listen "+p, err)
	}
	if waitHook != nil {
		waitHook()
	}
	if err := waitReadable(ln, until); err != nil {
		return -1, 0, err
	}
	c, err := accept(ln)
	if err != nil {
		return -1, 0, os.NewSyscallError("accept "+p, err)
	}
	extra, err := accept(ln)
	closeLn()
	if err == nil {
		unix.Close(extra)
		unix.Close(c)
		return -1, 0, errors.New("a second connection to the control socket " + p + ": refusing both")
	}
	cred, err := unix.GetsockoptUcred(c, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		unix.Close(c)
		return -1, 0, os.NewSyscallError("getsockopt(SO_PEERCRED)", err)
	}
	if cred.Uid != uint32(os.Geteuid()) {
		unix.Close(c)
		return -1, 0, errors.New("the control socket was connected by uid " + itoa(int(cred.Uid)) + ", not the watcher's " + itoa(os.Geteuid()))
	}
	return c, int(cred.Pid), nil
}

// sockCall is bind(2) or connect(2) (call) of socket fd to path p.
// Raw calls: x/sys/unix's Sockaddr interface brings in every address
// family's code, which the PID-1 binary has no room for.
func sockCall(call uintptr, fd int, p string) error {
	var sa unix.RawSockaddrUnix
	if len(p) >= len(sa.Path) {
		return syscall.ENAMETOOLONG
	}
	sa.Family = unix.AF_UNIX
	for i := 0; i < len(p); i++ {
		sa.Path[i] = int8(p[i])
	}
	_, _, errno := unix.Syscall(call, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(2+len(p)+1))
	if errno != 0 {
		return errno
	}
	return nil
}

// accept is accept4(fd, NULL, NULL, SOCK_CLOEXEC).
func accept(fd int) (int, error) {
	c, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(fd), 0, 0, unix.SOCK_CLOEXEC, 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(c), nil
}

// waitHook, when set (tests), runs before the accept waits.
var waitHook func()

// waitReadable waits until fd is readable, or fails at until.
func waitReadable(fd int, until time.Time) error {
	for {
		left := time.Until(until)
		if left <= 0 {
			return errors.New("no connection to the control socket within --spec-timeout")
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left/time.Millisecond)+1)
		switch {
		case errors.Is(err, syscall.EINTR):
		case err != nil:
			return os.NewSyscallError("poll", err)
		case n > 0:
			return nil
		}
	}
}

// killAllBut signals every process of the box but PID 1 and spare, by
// pid: a process forked while the list is read is found in the next
// round. The watcher's own exit still ends whatever is left.
func killAllBut(sig syscall.Signal, spare int) {
	for round := 0; round < 4; round++ {
		names, _ := shared.ReadDirNames("/proc")
		found := false
		for _, name := range names {
			pid := 0
			for _, c := range name {
				if c < '0' || c > '9' {
					pid = -1
					break
				}
				pid = pid*10 + int(c-'0')
			}
			if pid <= 1 || pid == spare {
				continue
			}
			if syscall.Kill(pid, sig) == nil {
				found = true
			}
		}
		if !found || sig != syscall.SIGKILL {
			return
		}
	}
}

// closeWrite ends the watcher's side of a unix control stream once the
// exit record is out, and waits (up to wait) until the relay has passed
// everything on and closed its side, which the frame reader sees.
func (w *watcher) closeWrite(wait time.Duration) {
	if w.conn < 0 || w.eof == nil {
		return
	}
	_ = unix.Shutdown(w.conn, unix.SHUT_WR)
	t := newAlarm(wait)
	defer t.Stop()
	for {
		select {
		case <-w.eof:
			return
		case <-w.frames:
		case <-t.C:
			return
		}
	}
}
