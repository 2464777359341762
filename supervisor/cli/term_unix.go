//go:build linux || darwin

package cli

// The host terminal for exec --tty: raw mode for the session, always
// restored, and the window size (at the start and on every SIGWINCH).

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// ttySupported: this system can put a terminal in raw mode.
const ttySupported = true

// isTerminal reports whether fd is a terminal.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	return err == nil
}

// makeRaw puts the terminal fd in raw mode (cfmakeraw) and returns what
// puts it back as it was.
func makeRaw(fd int) (restore func() error, err error) {
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return nil, os.NewSyscallError("tcgetattr", err)
	}
	raw := rawTermios(*old)
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &raw); err != nil {
		return nil, os.NewSyscallError("tcsetattr", err)
	}
	return func() error {
		return os.NewSyscallError("tcsetattr", unix.IoctlSetTermios(fd, ioctlSetTermios, old))
	}, nil
}

// rawTermios is t as cfmakeraw(3) leaves it: no input processing, no
// echo, no signals from keys, no output processing, 8-bit characters,
// reads return after one byte.
func rawTermios(t unix.Termios) unix.Termios {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	return t
}

// windowSize is the terminal fd's size; ok is false when fd is no
// terminal or the size is unset.
func windowSize(fd int) (rows, cols uint16, ok bool) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 || ws.Col == 0 {
		return 0, 0, false
	}
	return ws.Row, ws.Col, true
}

// notifyResize delivers SIGWINCH on ch; the returned func stops it.
func notifyResize(ch chan<- os.Signal) (stop func()) {
	signal.Notify(ch, unix.SIGWINCH)
	return func() { signal.Stop(ch) }
}
