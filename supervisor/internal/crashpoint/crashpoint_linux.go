package crashpoint

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// At stops the process (SIGSTOP on itself) when the test asked
// for this point, after one line on stderr. A test waits for the
// stopped state in /proc/PID/stat and then sends SIGKILL; a SIGCONT
// instead lets the lifecycle go on.
func At(point string) {
	if !armed(point) {
		return
	}
	fmt.Fprintf(os.Stderr, "supervisor: %s=%s: stopping for the test\n", Env, point)
	// Thread-directed: the calling thread takes the stop on its way back
	// from the syscall, so the lifecycle goes no further. A kill(2) to
	// the process may be taken by another (idle) thread while this one
	// runs on (far enough to start a native box).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.Tgkill(os.Getpid(), unix.Gettid(), unix.SIGSTOP)
}
