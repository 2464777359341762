package cli

import "golang.org/x/sys/unix"

// The termios ioctls: tcgetattr and tcsetattr(TCSANOW).
const (
	ioctlGetTermios = unix.TIOCGETA
	ioctlSetTermios = unix.TIOCSETA
)
