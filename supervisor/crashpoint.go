package supervisor

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Crash points: the lifecycle calls crashpoint at each of these, so that
// the crash-window tests can SIGKILL the supervisor exactly there.
const (
	CrashAfterJournal = "after-journal" // intent journaled, nothing created yet
	CrashAfterCreate  = "after-create"  // the box exists, not started
	CrashAfterStart   = "after-start"   // the box runs, hello/spec not sent (before ready)
	CrashRemoving     = "removing"      // removal intent journaled, box not yet removed
)

// CrashPointEnv names the crash point at which the supervisor stops
// itself (SIGSTOP) for a test to kill it. Tests only: it is never set in
// production, and an unknown value does nothing.
const CrashPointEnv = "DEATHWATCH_TEST_PAUSE_AT"

// crashPointAt is read once, at start-up.
var crashPointAt = os.Getenv(CrashPointEnv)

// crashpoint stops the process (SIGSTOP on itself) when the test asked
// for this point, after one line on stderr. A test waits for the
// stopped state in /proc/PID/stat and then sends SIGKILL; a SIGCONT
// instead lets the lifecycle go on.
func crashpoint(point string) {
	if crashPointAt == "" || crashPointAt != point {
		return
	}
	fmt.Fprintf(os.Stderr, "supervisor: %s=%s: stopping for the test\n", CrashPointEnv, point)
	// Thread-directed: the calling thread takes the stop on its way back
	// from the syscall, so the lifecycle goes no further. A kill(2) to
	// the process may be taken by another (idle) thread while this one
	// runs on for milliseconds — measured: a native box got started.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.Tgkill(os.Getpid(), unix.Gettid(), unix.SIGSTOP)
}
