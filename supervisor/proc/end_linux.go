package proc

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotThatProcess is a pid that now belongs to a process with another
// start time: it is never signalled.
var ErrNotThatProcess = errors.New("the pid belongs to another process now")

// End ends the process pid that started at start: SIGTERM, then SIGKILL
// when it is still there after bound. The signals go through a pidfd
// opened before the start time is checked, so they reach that process
// or none. A process already gone is no error.
func End(pid int, start uint64, bound time.Duration) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return os.NewSyscallError("pidfd_open", err)
	}
	defer unix.Close(fd)
	st, err := StartTime(pid)
	if err != nil {
		return nil // gone between the two
	}
	if st != start {
		return fmt.Errorf("pid %d: %w (start time %d, not %d)", pid, ErrNotThatProcess, st, start)
	}
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGKILL} {
		if err := unix.PidfdSendSignal(fd, sig, nil, 0); errors.Is(err, unix.ESRCH) {
			return nil
		} else if err != nil {
			return os.NewSyscallError("pidfd_send_signal", err)
		}
		if pidfdExited(fd, bound) {
			return nil
		}
	}
	return fmt.Errorf("pid %d still runs %v after SIGKILL", pid, bound)
}

// pidfdExited waits up to d for the process of pidfd to exit.
func pidfdExited(fd int, d time.Duration) bool {
	until := time.Now().Add(d)
	for {
		left := time.Until(until)
		if left < 0 {
			left = 0
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0
	}
}
