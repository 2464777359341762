package supervisor

import (
	"math"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// HoldLive hands w, the write end of a box's live pipe (a runtime
// that passes the box its read end, as native does), to a thread of its
// own (holdApart) and returns the function that closes it. Where the
// kernel refuses, w stays open here and release closes it.
func HoldLive(w *os.File) (release func()) {
	if rel, err := holdApart(int(w.Fd())); err == nil {
		w.Close()
		return rel
	}
	return func() { w.Close() }
}

// holdApart keeps a copy of fd open on an OS thread of its own that
// does nothing else and has a file table of its own (unshare
// CLONE_FILES, every other descriptor closed in it), and returns the
// function that closes it there; the caller then closes its own copy.
//
// Why: a process's shared file table is closed by its last thread to
// exit, and in do_exit that thread first tears down the address space
// (exit_mm before exit_files). For the supervisor (11 MB resident, 8
// threads) that is milliseconds on a host where page-table changes are
// dear, and the box's alarm waited for all of it. A thread's own table
// is closed in that thread's exit, which follows the SIGKILL at once:
// the address space is torn down by whichever thread is last, and the
// watcher is already killing the agents by then, before the engine has
// seen the supervisor's connections close (TestBenchSupervisorKill
// prints how much earlier). The main thread as the holder, which the
// kernel wakes first on a group kill, is no better.
//
// The thread stays locked (runtime.LockOSThread, never unlocked), so
// the Go runtime never runs anything else on it and ends it when the
// goroutine returns. It is never the main thread: /proc/self/fd (read
// as the process's table, as by the podman database's open) shows the
// main thread's. release returns once the copy is closed. err: the
// kernel refused (no close_range before Linux 5.9); the caller keeps
// its own copy.
func holdApart(fd int) (release func(), err error) {
	held, rel := make(chan error), make(chan struct{})
	var serve func()
	serve = func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: /proc/self/fd shows its table, which must
			// stay the process's. Hand over to another thread (this one,
			// locked, can run nothing else meanwhile), then let go.
			moved := make(chan struct{})
			go func() { close(moved); serve() }()
			<-moved
			runtime.UnlockOSThread()
			return
		}
		err := unix.Unshare(unix.CLONE_FILES)
		if err == nil && fd > 0 {
			err = unix.CloseRange(0, uint(fd-1), 0)
		}
		if err == nil {
			err = unix.CloseRange(uint(fd+1), math.MaxUint32, 0)
		}
		held <- err
		if err != nil {
			// Returning while locked ends the thread and its table.
			return
		}
		<-rel
		unix.Close(fd)
		held <- nil
	}
	go serve()
	if err := <-held; err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(rel)
			<-held // closed: the watcher's read reaches EOF
		})
	}, nil
}
