// Package crashpoint is the crash-window tests' hook: the supervisor
// stops itself (SIGSTOP) at a named point of its lifecycle when the test
// asked for it, so the test can SIGKILL it exactly there.
package crashpoint

import (
	"os"
	"sync/atomic"
)

// Crash points: the lifecycle calls At at each of these, so that
// the crash-window tests can SIGKILL the supervisor exactly there.
const (
	BeforeWatch  = "before-watch"  // the parent read at start, its handle not yet taken
	AfterJournal = "after-journal" // intent journaled, nothing created yet
	InRun        = "in-run"        // a one-step runtime's client creates the box (journal: intent)
	AfterCreate  = "after-create"  // the box exists, not started (one-step: its client starts it)
	AfterStage   = "after-stage"   // the box runs, its copy-in put by its runtime; copy-in-landed not sent
	AfterStart   = "after-start"   // the box runs, hello/spec not sent (before ready)
	Removing     = "removing"      // removal intent journaled, box not yet removed
	BeforeFetch  = "before-fetch"  // every copy-out manifest has come, the archive not yet read
)

// Env names the crash point at which the supervisor stops
// itself (SIGSTOP) for a test to kill it. Tests only: it is never set in
// production, and an unknown value does nothing.
const Env = "DEATHWATCH_TEST_PAUSE_AT"

// pointAt is read once, at start-up.
var pointAt = os.Getenv(Env)

// armed reports whether the test asked to stop at point, outside
// a nested proof launch (Quiet).
func armed(point string) bool {
	return pointAt != "" && pointAt == point && Quiet.Load() == 0
}

// Quiet, above 0, keeps the crash points of a launch that runs
// inside another (the live FIFO's bind proof) from firing: the test
// asked to stop the outer one.
var Quiet atomic.Int32
