package watcher

import (
	"os"
	"syscall"

	"deathwatch/shared"
	"golang.org/x/sys/unix"
)

// The agent's terminal: a pseudo-terminal the watcher allocates in the
// box (so that no runtime needs a -t of its own). The agent gets the
// slave as fds 0-2 and as its controlling terminal, in a session of its
// own; the watcher keeps the master, relays what it reads as stdout
// frames and writes the host's input to it.
//
// A few ioctls do what github.com/creack/pty would: that package starts
// commands through os/exec, which the watcher's import fence keeps out
// of the PID-1 binary.

// openPty allocates a pseudo-terminal from the box's /dev/ptmx, sized
// rows x cols (left unset when either is 0), its slave owned by uid.
// Both ends are close-on-exec, and neither becomes the watcher's
// controlling terminal. The slave is reached from the master
// (TIOCGPTPEER), never by a path in /dev/pts. It runs as root, before
// the watcher drops its privileges.
func openPty(uid uint32, rows, cols uint16) (master, slave *os.File, err error) {
	// OpenFile adds O_CLOEXEC, and puts the master in the runtime's
	// poller: a read or a write that waits holds no thread.
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fail := func(name string, err error) (*os.File, *os.File, error) {
		master.Close()
		if slave != nil {
			slave.Close()
		}
		return nil, nil, os.NewSyscallError(name, err)
	}
	rc, err := master.SyscallConn()
	if err != nil {
		return fail("pty master", err)
	}
	sfd := -1
	var name string
	cerr := rc.Control(func(fd uintptr) {
		// unlockpt(3)
		if err = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); err != nil {
			name = "ioctl(TIOCSPTLCK)"
			return
		}
		r, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, unix.TIOCGPTPEER, uintptr(os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC))
		if e != 0 {
			err, name = e, "ioctl(TIOCGPTPEER) (Linux 4.13 or later)"
			return
		}
		sfd = int(r)
		if rows > 0 && cols > 0 {
			if err = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
				name = "ioctl(TIOCSWINSZ)"
			}
		}
	})
	if sfd >= 0 {
		slave = os.NewFile(uintptr(sfd), "pty-slave")
	}
	if cerr != nil {
		return fail("pty master", cerr)
	}
	if err != nil {
		return fail(name, err)
	}
	if err := unix.Fchown(sfd, int(uid), -1); err != nil {
		return fail("fchown(pty slave)", err)
	}
	return master, slave, nil
}

// setWinsize sets the terminal's window size; the kernel sends SIGWINCH
// to its foreground process group when the size changes.
func setWinsize(master *os.File, r shared.Resize) error {
	return ioctlMaster(master, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: r.Rows, Col: r.Cols})
	})
}

// eofChar is the terminal's end-of-file character (VEOF; ^D unless the
// agent changed it). Termios requests on the master reach the slave.
func eofChar(master *os.File) byte {
	c := byte(4) // ^D
	_ = ioctlMaster(master, func(fd int) error {
		t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err == nil && t.Cc[unix.VEOF] != 0 {
			c = t.Cc[unix.VEOF]
		}
		return err
	})
	return c
}

func ioctlMaster(master *os.File, f func(fd int) error) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
