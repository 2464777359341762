package watcher

// The relay (watcher relay PATH): the host runs it in the box (for a
// pod, an exec session), and it carries the control stream between its
// stdin/stdout and the watcher's unix socket (unixcontrol.go). Its stdin
// reaching EOF (the host's session ended: the host died or closed the
// stream) ends its side of the socket, which is the watcher's EOF; the
// socket reaching EOF (the watcher sent its exit record) ends the relay.

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// relayConnectTimeout bounds the relay's wait for the watcher's socket:
// the box's container runs before its watcher listens.
const relayConnectTimeout = 30 * time.Second

// RelayRequested reports whether args ask for the relay.
func RelayRequested(args []string) bool { return len(args) > 1 && args[1] == "relay" }

// RelayMain runs the relay and returns its exit status.
func RelayMain(args []string) int {
	if len(args) != 3 {
		logf("usage: watcher relay PATH")
		return 2
	}
	// Not dumpable: a process of the same uid (the agent of a
	// restricted box) can neither trace it nor open its descriptors.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		logf("relay: prctl(PR_SET_DUMPABLE, 0): " + err.Error())
		return 1
	}
	// The box's sweeps spare the relay (killAll); the watcher's
	// signals to the agent's group never reach it, and nothing else
	// should end it but its streams.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	fd, err := relayConnect(args[2], time.Now().Add(relayConnectTimeout))
	if err != nil {
		logf("relay: " + err.Error())
		return 1
	}
	done := make(chan struct{})
	go func() {
		pump(1, fd)
		close(done)
	}()
	pump(fd, 0)
	_ = unix.Shutdown(fd, unix.SHUT_WR)
	waitTimeout(func() { <-done }, 2*time.Second)
	return 0
}

// pump copies from descriptor src to dst until src ends or dst fails.
// Plain reads and writes: io.Copy on files would bring the zero-copy
// paths (splice, sendfile) into the PID-1 binary.
func pump(dst, src int) {
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Read(src, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if n <= 0 {
			return
		}
		for b := buf[:n]; len(b) > 0; {
			k, err := unix.Write(dst, b)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				return
			}
			b = b[k:]
		}
	}
}

// relayConnect connects to the socket at p, waiting for it to appear
// until until.
func relayConnect(p string, until time.Time) (int, error) {
	wait := time.Millisecond
	for {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return -1, os.NewSyscallError("socket(AF_UNIX)", err)
		}
		err = sockCall(unix.SYS_CONNECT, fd, p)
		if err == nil {
			return fd, nil
		}
		unix.Close(fd)
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(until) {
			return -1, os.NewSyscallError("connect "+p, err)
		}
		time.Sleep(wait)
		wait = min(wait*2, 50*time.Millisecond)
	}
}
