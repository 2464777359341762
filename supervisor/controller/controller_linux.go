package controller

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"deathwatch/supervisor/proc"
)

// Supported says which link to the parent this host gives: LinkParent
// (pidfds, Linux 5.3+), else LinkPdeathsig, which fires when the parent
// thread that forked the supervisor exits, not only its process.
func Supported() string {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if errors.Is(err, unix.ENOSYS) {
		return LinkPdeathsig
	}
	if err == nil {
		unix.Close(fd)
	}
	return LinkParent
}

// pollRDHUP is a socket peer's shutdown, seen without a read.
const pollRDHUP = unix.POLLRDHUP

// parentMechanism is how LinkParent watches the parent here.
const parentMechanism = "pidfd"

func isNoProcess(err error) bool { return errors.Is(err, unix.ESRCH) || errors.Is(err, os.ErrNotExist) }

// watchParent takes a pidfd of the parent start, then checks that it is
// still the parent (parentVerdict): the pidfd is of the process that
// started us, alive when it was taken. Without pidfds it falls back to
// PR_SET_PDEATHSIG with SIGKILL: the watcher then sees the control
// stream end, as after any SIGKILL of the supervisor.
func watchParent(start int) (*Watch, error) {
	if start <= 1 {
		return nil, parentVerdict(start, 0, nil)
	}
	fd, err := unix.PidfdOpen(start, 0)
	if errors.Is(err, unix.ENOSYS) {
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
			return nil, os.NewSyscallError("prctl(PR_SET_PDEATHSIG)", err)
		}
		if err := parentVerdict(start, os.Getppid(), nil); err != nil {
			return nil, err
		}
		w := newWatch(LinkPdeathsig, start)
		w.StartTime, _ = proc.StartTime(start)
		return w, nil
	}
	if err != nil {
		return nil, parentVerdict(start, 0, os.NewSyscallError("pidfd_open", err))
	}
	if err := parentVerdict(start, os.Getppid(), nil); err != nil {
		unix.Close(fd)
		return nil, err
	}
	w := newWatch(LinkParent, start)
	if err := w.pin(fd, start, 0); err != nil {
		unix.Close(fd)
		return nil, err
	}
	w.poll(fd, false, fmt.Sprintf("the controller (parent pid %d) exited", start))
	return w, nil
}

// watchPID takes a pidfd of pid, checked with its start time.
func watchPID(pid int, start uint64) (*Watch, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, startVerdict(pid, start, 0, os.NewSyscallError("pidfd_open", err))
	}
	w := newWatch(LinkPID, pid)
	if err := w.pin(fd, pid, start); err != nil {
		unix.Close(fd)
		return nil, err
	}
	w.poll(fd, false, fmt.Sprintf("the controller (pid %d) exited", pid))
	return w, nil
}

// pin reads the start time of the process pidfd is for: read after the
// pidfd was opened and checked alive after, it is that process's (a pid
// is not reused before its process is reaped). One read of its stat
// gives the start time and whether it had exited (a zombie); the pidfd
// says whether it has since.
func (w *Watch) pin(pidfd, pid int, want uint64) error {
	st, err := proc.ReadStat(pid)
	if err == nil && (st.State == 'Z' || st.State == 'X' || exited(pidfd)) {
		err = unix.ESRCH
	}
	if err := startVerdict(pid, want, st.Start, err); err != nil {
		return err
	}
	w.StartTime = st.Start
	return nil
}

// exited reports whether the process of pidfd has exited.
func exited(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}
