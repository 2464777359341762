//go:build linux || darwin || freebsd

package controller

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// watchFD watches fd for EOF (--controller-fd).
func watchFD(fd int) (*Watch, error) {
	// The descriptor must reach no engine client and no box.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("--controller-fd %d: not an open descriptor: %w", fd, err)
	}
	w := newWatch(LinkFD, 0)
	w.poll(fd, true, fmt.Sprintf("the controller's descriptor %d reached EOF", fd))
	return w, nil
}

// poll waits in a goroutine until fd is readable or hung up: for a
// pidfd that is its process's exit; for a pipe or socket (read set)
// EOF, and data it reads is dropped. Close wakes it through a pipe.
func (w *Watch) poll(fd int, read bool, why string) {
	var wake [2]int
	if err := unix.Pipe(wake[:]); err != nil {
		// No pipe for Close: watch without one.
		wake = [2]int{-1, -1}
	} else {
		unix.CloseOnExec(wake[0])
		unix.CloseOnExec(wake[1])
	}
	var extra int16
	if read {
		extra = pollRDHUP
	}
	w.stop = func() {
		if wake[1] >= 0 {
			unix.Write(wake[1], []byte{0})
		}
	}
	go func() {
		defer func() {
			if wake[0] >= 0 {
				unix.Close(wake[0])
				unix.Close(wake[1])
			}
			if !read {
				unix.Close(fd)
			}
		}()
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | extra}, {Fd: int32(wake[0]), Events: unix.POLLIN}}
		buf := make([]byte, 512)
		for {
			_, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				w.gone(why + " (" + os.NewSyscallError("poll", err).Error() + ")")
				return
			}
			if fds[1].Revents != 0 {
				return // Close
			}
			re := fds[0].Revents
			if re == 0 {
				continue
			}
			if !read || re&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 || extra != 0 && re&extra != 0 {
				w.gone(why)
				return
			}
			n, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			if n <= 0 || err != nil {
				w.gone(why)
				return
			}
		}
	}()
}
