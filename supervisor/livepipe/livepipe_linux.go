// Package livepipe holds the write end of a box's live pipe for a runtime
// that passes the box its read end, so the supervisor's death closes it at once.
package livepipe

import (
	"math"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Hold hands w, the write end of a box's live pipe (a runtime
// that passes the box its read end, as native does), to a thread of its
// own (holdApart) and returns the function that closes it. Where the
// kernel refuses, w stays open here and release closes it.
func Hold(w *os.File) (release func()) {
	if rel, err := holdApart(int(w.Fd())); err == nil {
		w.Close()
		return rel
	}
	return func() { w.Close() }
}

// holdApart keeps a copy of fd open on an OS thread of its own that does
// nothing else and has a file table of its own (unshare CLONE_FILES,
// every other descriptor closed in it), and returns the function that
// closes it there; the caller then closes its own copy. A process's
// shared table is closed by its last thread to exit, after it tears
// down the address space (exit_mm before exit_files); a thread's own is
// closed right after the SIGKILL, so the watcher is killing the agents
// before the engine sees the supervisor's connections close. The main
// thread, which the kernel wakes first on a group kill, is no better.
//
// The thread stays locked, so the Go runtime runs nothing else on it and
// ends it when the goroutine returns; it is never the main thread (see
// serve). release returns once the copy is closed. err: the kernel
// refused (no close_range before Linux 5.9); the caller keeps its own.
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
