// Package journalbox rebuilds, from a journal entry, the Box a
// runtime's Remove needs (reconcile, the demo's clean-up).
package journalbox

import (
	"deathwatch/supervisor"
	"deathwatch/supervisor/journal"
)

// FromEntry is the Box a runtime's Remove needs, from the journal.
func FromEntry(e *journal.Entry) *supervisor.Box {
	st := map[string]string{}
	for k, v := range e.RuntimeState {
		st[k] = v
	}
	return &supervisor.Box{Name: e.Box, LaunchID: e.LaunchID, Nonce: e.Nonce, Labels: e.Labels, Image: e.Image, State: st}
}
