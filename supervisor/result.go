package supervisor

// What Exec returns: the box's outcome as data, and the failure that
// carries its exit status.

import (
	"time"

	"deathwatch/supervisor/exitcode"
)

// Result is what Exec reports of one launch.
type Result struct {
	// Code is the supervisor's exit status (the table in shared/exit.go):
	// the agent's own code, 128+N for its signal N, or a reserved code.
	Code int
	// Reason is the exited event's reason ("" when the launch ended
	// before its intent was journaled).
	Reason string
	// LaunchID, Box and Runtime name the launch ("" when it ended
	// before the runtime was chosen).
	LaunchID, Box, Runtime string
	// Timings are when each lifecycle event happened (zero: it did not).
	Timings Timings
	// Copies are the staged, exported and verified events of the
	// copy-ins and copy-outs, in order.
	Copies []Event
	// Removed says the box was removed; RemoveError is why not, when a
	// removal failed (the journal keeps the box for Reconcile).
	Removed     bool
	RemoveError string
}

// Timings are the times of a launch's lifecycle events.
type Timings struct {
	Journaled, Created, Started, Ready, Exited, Removed time.Time
}

// ExitError is Exec's failure: a cause the supervisor reports, with the
// exit status it means. errors.As with an *ExitError, or with any
// interface{ Code() int }, finds it through every wrap.
type ExitError = exitcode.Error

// record keeps what ev says of the launch in r.
func (r *Result) record(ev Event) {
	r.LaunchID, r.Box, r.Runtime = ev.LaunchID, ev.Box, ev.Runtime
	switch ev.Event {
	case EventJournaled:
		r.Timings.Journaled = ev.Time
	case EventCreated:
		r.Timings.Created = ev.Time
	case EventStarted:
		r.Timings.Started = ev.Time
	case EventReady:
		r.Timings.Ready = ev.Time
	case EventExited:
		r.Timings.Exited = ev.Time
		r.Reason = ev.Reason
		if ev.Code != nil {
			r.Code = *ev.Code
		}
	case EventRemoved:
		r.Timings.Removed = ev.Time
		r.Removed, r.RemoveError = ev.Error == "", ev.Error
	case EventStaged, EventExported, EventVerified:
		r.Copies = append(r.Copies, ev)
	}
}
