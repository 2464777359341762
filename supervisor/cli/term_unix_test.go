//go:build linux || darwin

package cli

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestRawTermios(t *testing.T) {
	// A cooked terminal as stty sane leaves it.
	var t0 unix.Termios
	t0.Iflag = unix.BRKINT | unix.ICRNL | unix.IXON | unix.IMAXBEL
	t0.Oflag = unix.OPOST | unix.ONLCR
	t0.Lflag = unix.ECHO | unix.ECHOE | unix.ICANON | unix.ISIG | unix.IEXTEN
	t0.Cflag = unix.CS7 | unix.PARENB | unix.CREAD
	r := rawTermios(t0)
	for _, c := range []struct {
		name      string
		flags, on uint64
	}{
		{"iflag BRKINT|ICRNL|IXON", uint64(r.Iflag), uint64(unix.BRKINT | unix.ICRNL | unix.IXON)},
		{"oflag OPOST", uint64(r.Oflag), uint64(unix.OPOST)},
		{"lflag ECHO|ICANON|ISIG|IEXTEN", uint64(r.Lflag), uint64(unix.ECHO | unix.ICANON | unix.ISIG | unix.IEXTEN)},
		{"cflag PARENB", uint64(r.Cflag), uint64(unix.PARENB)},
	} {
		if c.flags&c.on != 0 {
			t.Errorf("%s still set in raw mode", c.name)
		}
	}
	if r.Cflag&unix.CSIZE != unix.CS8 || r.Cflag&unix.CREAD == 0 {
		t.Errorf("cflag %#x: want CS8 and CREAD kept", r.Cflag)
	}
	if r.Cc[unix.VMIN] != 1 || r.Cc[unix.VTIME] != 0 {
		t.Errorf("VMIN %d VTIME %d, want 1 0", r.Cc[unix.VMIN], r.Cc[unix.VTIME])
	}
	if r.Iflag&unix.IMAXBEL == 0 || r.Lflag&unix.ECHOE == 0 {
		t.Errorf("flags beyond cfmakeraw's were changed")
	}
}
