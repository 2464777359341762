package watcher

import (
	"errors"
	"os"
	"syscall"
)

// The live FIFO (spec.LiveFIFO): a second, earlier alarm beside the
// control stream. The supervisor holds the only write end of a FIFO on
// the host, bind-mounted read-only into the box where only the
// watcher's uid can open it; when the supervisor dies the kernel closes
// that end and the watcher's read sees EOF at once, without waiting for
// the engine to close the box's stdin. It never replaces the control
// stream: either one ending is a liveness loss. The native runtime
// gives the same alarm as an inherited pipe (--live-fd): there the
// control stream is the supervisor's own socket, but the supervisor's
// copy of it closes only after its address space is torn down, and the
// pipe's write end is held apart from that (livepipe.Hold).

// errLiveEOF is the live FIFO's end, a liveness loss like the control
// stream's EOF.
var errLiveEOF = errors.New("the supervisor's live FIFO reached EOF (the supervisor is gone)")

// openLive opens the live FIFO at p before the agent exists and checks
// that it is the supervisor's: the pipe must hold the launch nonce,
// which the supervisor wrote into it before the box was created. A FIFO
// that no supervisor holds open (no writer, no nonce), anything other
// than a FIFO, or a symlink is refused: the caller fails closed.
func openLive(p, nonce string) (*os.File, error) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open live FIFO", Path: p, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		syscall.Close(fd)
		return nil, errors.New("live FIFO " + p + ": not a FIFO")
	}
	buf := make([]byte, len(nonce)+1)
	n, err := syscall.Read(fd, buf)
	if n < 0 {
		n = 0
	}
	if nonce == "" || string(buf[:n]) != nonce {
		syscall.Close(fd)
		why := "does not carry this launch's nonce"
		if n == 0 && err == nil {
			why = "has no writer (the supervisor never opened it, or is gone)"
		}
		return nil, errors.New("live FIFO " + p + ": " + why)
	}
	return os.NewFile(uintptr(fd), "live"), nil
}

// inheritedLive takes the native runtime's live pipe (--live-fd): the
// same alarm as the live FIFO, without a path. The supervisor created
// the pipe and the box inherited its read end through the clone, so
// there is nothing for the agent to plant and no nonce to check; it
// must be a pipe, read through the poller.
func inheritedLive(fd int) (*os.File, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil, errors.New("--live-fd=" + itoa(fd) + ": not a pipe")
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, errors.New("--live-fd=" + itoa(fd) + ": " + err.Error())
	}
	return os.NewFile(uintptr(fd), "live"), nil
}

// watchLive reads f until its end (it carries nothing after the nonce)
// and reports that end as the control stream's would be: once the agent
// runs the box is SIGKILLed here, on the thread that read it, then the
// loop ends the box (handleFrame).
func (w *watcher) watchLive(f *os.File) {
	var b [16]byte
	for {
		if _, err := f.Read(b[:]); err != nil {
			break
		}
	}
	w.killOnStream(errLiveEOF)
	w.frames <- frameEvent{err: errLiveEOF}
}
