package supervisor

import (
	"os"
	"sync/atomic"
)

// Crash points: the lifecycle calls crashpoint at each of these, so that
// the crash-window tests can SIGKILL the supervisor exactly there.
const (
	CrashBeforeWatch  = "before-watch"  // the parent read at start, its handle not yet taken
	CrashAfterJournal = "after-journal" // intent journaled, nothing created yet
	CrashInRun        = "in-run"        // a one-step runtime's client creates the box (journal: intent)
	CrashAfterCreate  = "after-create"  // the box exists, not started (one-step: its client starts it)
	CrashAfterStage   = "after-stage"   // the box runs, its copy-in put by its runtime; copy-in-landed not sent
	CrashAfterStart   = "after-start"   // the box runs, hello/spec not sent (before ready)
	CrashRemoving     = "removing"      // removal intent journaled, box not yet removed
	CrashBeforeFetch  = "before-fetch"  // every copy-out manifest has come, the archive not yet read
)

// CrashPointEnv names the crash point at which the supervisor stops
// itself (SIGSTOP) for a test to kill it. Tests only: it is never set in
// production, and an unknown value does nothing.
const CrashPointEnv = "DEATHWATCH_TEST_PAUSE_AT"

// crashPointAt is read once, at start-up.
var crashPointAt = os.Getenv(CrashPointEnv)

// crashArmed reports whether the test asked to stop at point, outside
// a nested proof launch (crashQuiet).
func crashArmed(point string) bool {
	return crashPointAt != "" && crashPointAt == point && crashQuiet.Load() == 0
}

// crashQuiet, above 0, keeps the crash points of a launch that runs
// inside another (the live FIFO's bind proof) from firing: the test
// asked to stop the outer one.
var crashQuiet atomic.Int32
