package watcher

import (
	"os"
	"strings"
	"syscall"
)

// cgroupDir is the folder of the cgroup of controller named by the
// contents of /proc/self/cgroup: "N:controller[,other]:/path" on cgroup
// v1 (also on a hybrid host, whose "0::" line names a v2 tree without
// controllers; v1 is then true), else "0::/path" on v2. "" when neither
// is there.
//
// It cuts the lines where they are: strings.Split would make slices on
// the heap, whose spans the watcher, which rarely if ever collects,
// keeps resident (see frameNames in shared).
func cgroupDir(procCgroup, controller string) (dir string, v1 bool) {
	for rest := procCgroup; rest != ""; {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		id, tail, ok := strings.Cut(line, ":")
		list, path, ok2 := strings.Cut(tail, ":")
		switch {
		case !ok || !ok2:
		case hasController(list, controller):
			return "/sys/fs/cgroup/" + controller + path, true
		case id == "0" && list == "":
			dir = "/sys/fs/cgroup" + path
		}
	}
	return dir, false
}

func hasController(list, c string) bool {
	for list != "" {
		var x string
		x, list, _ = strings.Cut(list, ",")
		if x == c {
			return true
		}
	}
	return false
}

// readFile reads a small file of procfs or cgroupfs with plain system
// calls. os.ReadFile would register it with the runtime's poller first
// (epoll_create1, eventfd, epoll_ctl and four fcntl on the first use,
// epoll_ctl and four fcntl on every other), all of it before the
// agent's fork.
func readFile(name string) ([]byte, error) {
	fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer syscall.Close(fd)
	b := make([]byte, 0, 512)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := syscall.Read(fd, b[len(b):cap(b)])
		switch {
		case err == syscall.EINTR:
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: name, Err: err}
		case n == 0:
			return b, nil
		default:
			b = b[:len(b)+n]
		}
	}
}

// writeFile writes b to an existing file of procfs with plain system
// calls (see readFile).
func writeFile(name string, b []byte) error {
	fd, err := syscall.Open(name, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer syscall.Close(fd)
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		switch {
		case err == syscall.EINTR:
		case err != nil:
			return &os.PathError{Op: "write", Path: name, Err: err}
		case n == 0:
			return &os.PathError{Op: "write", Path: name, Err: syscall.EIO}
		default:
			b = b[n:]
		}
	}
	return nil
}
