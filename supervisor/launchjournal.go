package supervisor

// The launch's journal steps: the intent staged beside the probe and
// committed before anything is created, the created and started writes
// beside the engine's next step.

import (
	"maps"
)

// journal writes the entry in state, after the write in flight (if any)
// landed; it returns the first error of the two.
func (l *launch) journal(state string) error {
	perr := l.settle()
	l.stamp(state)
	if err := l.j.Put(l.entry); err != nil {
		return err
	}
	return perr
}

// journalBeside is journal for the created and started writes of a
// runtime whose intent finds its boxes (CapIntentFinds): once
// the write before it landed (its error is returned here), it writes a
// copy of the entry in the background, beside the engine's next step —
// the attach and start after created, the watcher's handshake after
// started: each fsync off the launch's path. The next journal (at the
// latest the removal intent) waits for it; a started write that failed
// is said there, and the entry stays open for reconcile (the intent is
// durable: reconcile finds the box by its labels and nonce).
func (l *launch) journalBeside(state string) error {
	if !l.beside {
		return l.journal(state)
	}
	if err := l.settle(); err != nil {
		return err
	}
	l.stamp(state)
	e := *l.entry
	e.RuntimeState = maps.Clone(e.RuntimeState)
	done := make(chan error, 1)
	l.pending = done
	go func() { done <- l.j.Put(&e) }()
	return nil
}

// stamp sets the entry's state, and what the runtime recorded.
func (l *launch) stamp(state string) {
	l.entry.State = state
	if len(l.box.State) > 0 {
		l.entry.RuntimeState = l.box.State
	}
}

// settle waits for the write in flight, if any, and returns its error.
func (l *launch) settle() error {
	if l.pending == nil {
		return nil
	}
	err := <-l.pending
	l.pending = nil
	return err
}

// crashAt is crashpoint(point) once the write in flight landed, when
// the test asked for point: the crash-window tests check that the
// journal says the point's state. (Without a test nothing waits: a kill
// there leaves the previous state, which reconcile handles as the kill
// one point earlier.)
func (l *launch) crashAt(point string) {
	if crashArmed(point) && l.pending != nil {
		err := <-l.pending
		l.pending = make(chan error, 1)
		l.pending <- err
	}
	crashpoint(point)
}

// stagedIntent is what staging the intent left.
type stagedIntent struct {
	s   *StagedEntry
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
