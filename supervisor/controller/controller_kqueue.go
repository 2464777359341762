//go:build darwin || freebsd

package controller

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"deathwatch/supervisor/proc"
)

// Supported says which link to the parent this host gives: a kqueue
// EVFILT_PROC watch of its exit.
func Supported() string { return LinkParent }

const pollRDHUP = 0

// parentMechanism is how LinkParent watches the parent here.
const parentMechanism = "kqueue"

func isNoProcess(err error) bool { return errors.Is(err, unix.ESRCH) }

func watchParent(start int) (*Watch, error) {
	if start <= 1 {
		return nil, parentVerdict(start, 0, nil)
	}
	w, err := watchExit(LinkParent, start, fmt.Sprintf("the controller (parent pid %d) exited", start))
	if err != nil {
		return nil, parentVerdict(start, 0, err)
	}
	if err := parentVerdict(start, os.Getppid(), nil); err != nil {
		w.Close()
		return nil, err
	}
	w.StartTime, _ = proc.StartTime(start)
	return w, nil
}

func watchPID(pid int, start uint64) (*Watch, error) {
	w, err := watchExit(LinkPID, pid, fmt.Sprintf("the controller (pid %d) exited", pid))
	if err != nil {
		return nil, startVerdict(pid, start, 0, err)
	}
	st, err := proc.StartTime(pid)
	if err := startVerdict(pid, start, st, err); err != nil {
		w.Close()
		return nil, err
	}
	w.StartTime = st
	return w, nil
}

// watchExit registers a kqueue NOTE_EXIT watch of pid (ESRCH: it is
// gone) and waits for it in a goroutine.
func watchExit(link string, pid int, why string) (*Watch, error) {
	kq, err := unix.Kqueue()
	if err != nil {
		return nil, os.NewSyscallError("kqueue", err)
	}
	unix.CloseOnExec(kq)
	ev := []unix.Kevent_t{{Ident: uint64(pid), Filter: unix.EVFILT_PROC, Flags: unix.EV_ADD | unix.EV_ONESHOT, Fflags: unix.NOTE_EXIT}}
	if _, err := unix.Kevent(kq, ev, nil, nil); err != nil {
		unix.Close(kq)
		return nil, os.NewSyscallError("kevent", err)
	}
	w := newWatch(link, pid)
	w.stop = func() { unix.Close(kq) }
	go func() {
		out := make([]unix.Kevent_t, 1)
		for {
			n, err := unix.Kevent(kq, nil, out, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err == nil && n == 0 {
				continue
			}
			w.gone(why)
			return
		}
	}()
	return w, nil
}
