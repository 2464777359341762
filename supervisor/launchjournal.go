package supervisor

import (
	"deathwatch/supervisor/controller"
	"deathwatch/supervisor/internal/crashpoint"
	"deathwatch/supervisor/journal"
)

// The launch's journal steps: the intent staged beside the probe and
// committed before anything is created, then each state written and
// synced before the step that follows it.

// journal writes the entry in state, synced before it returns.
func (l *launch) journal(state string) error {
	l.stamp(state)
	return l.j.Put(l.entry)
}

// stamp sets the entry's state, and what the runtime recorded.
func (l *launch) stamp(state string) {
	l.entry.State = state
	if len(l.box.State) > 0 {
		l.entry.RuntimeState = l.box.State
	}
}

// crashAt is crashpoint.At(point): the crash-window tests check that the
// journal says the point's state.
func (l *launch) crashAt(point string) {
	crashpoint.At(point)
}

// stagedIntent is what staging the intent left.
type stagedIntent struct {
	s   *journal.StagedEntry
	err error
}

// stageIntent stages the intent in the background (Journal.Stage).
func (l *launch) stageIntent() {
	e := *l.entry
	done := make(chan stagedIntent, 1)
	l.staged = done
	go func() {
		s, err := l.j.Stage(&e)
		done <- stagedIntent{s, err}
	}()
}

// commitIntent makes the staged intent the launch's entry.
func (l *launch) commitIntent() error {
	r := <-l.staged
	l.staged = nil
	if r.err != nil {
		return r.err
	}
	return r.s.Commit()
}

// dropIntent removes a staged intent that run did not commit: the
// launch was refused before anything was created, or Prepare changed
// the box. (A kill before this leaves a temporary file, which is no
// entry.)
func (l *launch) dropIntent() {
	if l.staged == nil {
		return
	}
	if r := <-l.staged; r.s != nil {
		r.s.Drop()
	}
	l.staged = nil
}

// controllerRecord is the journal's record of w, beside owner (nil:
// no controller is watched or recorded).
func controllerRecord(w *controller.Watch, owner journal.Owner) *journal.ControllerRecord {
	if w == nil {
		return nil
	}
	r := &journal.ControllerRecord{Link: w.Link}
	if w.PID > 0 {
		r.Owner = journal.Owner{PID: w.PID, StartTime: w.StartTime, BootID: owner.BootID, PIDNS: owner.PIDNS}
	}
	return r
}
