package native

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// startInCgroupV1 runs start (the clone of a box's init) on a thread of
// the supervisor that sits in the box's v1 cgroup for the call: a child
// is born in its parent thread's cgroups, and a CLONE_NEWCGROUP clone's
// namespace is rooted there. So the init, and every thread its Go
// runtime starts, is in the box cgroup from its first instruction, and
// needs neither a move of each of its threads nor a namespace of its
// own (each a stop of its world). A thread moving itself skips the
// global lock, and RCU wait, that moving a process from outside takes.
//
// box are the box's "tasks" files (memory, pids, freezer), root the v1
// mount. The thread goes back to its own cgroups before it is let go;
// if it cannot, it stays locked and ends with its goroutine, which runs
// nothing else: a supervisor thread left in the box's cgroup would be
// killed with the box.
func startInCgroupV1(box []*os.File, root string, start func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := threadTasksV1(root)
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer func() {
			for _, f := range home {
				f.Close()
			}
		}()
		back := func() error {
			for _, f := range home {
				if _, err := f.Write([]byte("0")); err != nil {
					return fmt.Errorf("move the supervisor's thread back to %s: %w", f.Name(), err)
				}
			}
			return nil
		}
		var serr error
		for _, f := range box {
			if _, err := f.Write([]byte("0")); err != nil {
				serr = fmt.Errorf("join the box cgroup (%s): %w", f.Name(), err)
				break
			}
		}
		if serr == nil {
			serr = start()
		}
		if err := back(); err != nil {
			done <- err // the thread ends with this goroutine (still locked)
			return
		}
		runtime.UnlockOSThread()
		done <- serr
	}()
	return <-done
}

// threadTasksV1 opens the "tasks" files of the calling thread's own
// cgroups in the v1 hierarchies a box joins.
func threadTasksV1(root string) ([]*os.File, error) {
	f, err := os.Open("/proc/thread-self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*os.File
	s := bufio.NewScanner(f)
	for s.Scan() {
		// hierarchy-id:controller,list:/path
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if !slices.Contains(v1Controllers, c) {
				continue
			}
			t, err := os.OpenFile(filepath.Join(root, c, parts[2], "tasks"), os.O_WRONLY, 0)
			if err != nil {
				for _, o := range out {
					o.Close()
				}
				return nil, fmt.Errorf("open the supervisor's own cgroup: %w", err)
			}
			out = append(out, t)
		}
	}
	if len(out) != len(v1Controllers) {
		for _, o := range out {
			o.Close()
		}
		return nil, fmt.Errorf("the supervisor's thread is in %d of the %d v1 hierarchies %v", len(out), len(v1Controllers), v1Controllers)
	}
	return out, s.Err()
}
