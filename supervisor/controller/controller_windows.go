package controller

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/windows"
)

// Supported says which link to the parent this host gives: a wait on a
// handle of the parent process.
func Supported() string { return LinkParent }

// parentMechanism is how LinkParent watches the parent here.
const parentMechanism = "process handle"

func isNoProcess(err error) bool { return errors.Is(err, windows.ERROR_INVALID_PARAMETER) }

// watchParent opens a handle of the parent (Windows never reparents: a
// handle of a process started after us is of a reused pid, not of our
// parent).
func watchParent(start int) (*Watch, error) {
	if start <= 0 {
		return nil, parentVerdict(1, 0, nil)
	}
	w, created, err := watchExit(LinkParent, start, fmt.Sprintf("the controller (parent pid %d) exited", start))
	if err != nil {
		return nil, parentVerdict(start, 0, err)
	}
	if self, err := creation(windows.CurrentProcess()); err == nil && created > self {
		w.Close()
		return nil, parentVerdict(start, -1, nil)
	}
	return w, nil
}

func watchPID(pid int, start uint64) (*Watch, error) {
	w, created, err := watchExit(LinkPID, pid, fmt.Sprintf("the controller (pid %d) exited", pid))
	if err != nil {
		return nil, startVerdict(pid, start, 0, err)
	}
	if err := startVerdict(pid, start, created, nil); err != nil {
		w.Close()
		return nil, err
	}
	w.StartTime = created
	return w, nil
}

// watchExit opens pid for SYNCHRONIZE and waits on it in a goroutine.
func watchExit(link string, pid int, why string) (*Watch, uint64, error) {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE|windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return nil, 0, os.NewSyscallError("OpenProcess", err)
	}
	created, _ := creation(h)
	w := newWatch(link, pid)
	w.stop = func() {} // the wait ends with the process
	go func() {
		windows.WaitForSingleObject(h, windows.INFINITE)
		windows.CloseHandle(h)
		w.gone(why)
	}()
	return w, created, nil
}

// creation is a process's creation time (100 ns since 1601).
func creation(h windows.Handle) (uint64, error) {
	var c, e, k, u windows.Filetime
	if err := windows.GetProcessTimes(h, &c, &e, &k, &u); err != nil {
		return 0, err
	}
	return uint64(c.HighDateTime)<<32 | uint64(c.LowDateTime), nil
}

func watchFD(fd int) (*Watch, error) {
	return nil, fmt.Errorf("--controller-fd %d: not on Windows; use --controller-pid or start the supervisor as the controller's child", fd)
}
