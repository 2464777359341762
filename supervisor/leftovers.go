package supervisor

import "deathwatch/supervisor/journal"

// ProbeInstance is the instance of the staging probe's box: doctor's,
// and the one exec's --stage bind|auto launches.
func ProbeInstance(instance string) string { return instance + ".doctor" }

// ProveInstance is the instance prove-deathwatch's trials run under.
func ProveInstance(instance string) string { return instance + ".prove" }

// BoxFromEntry is the Box a runtime's Remove needs, from the journal.
func BoxFromEntry(e *journal.Entry) *Box {
	st := map[string]string{}
	for k, v := range e.RuntimeState {
		st[k] = v
	}
	return &Box{Name: e.Box, LaunchID: e.LaunchID, Nonce: e.Nonce, Labels: e.Labels, Image: e.Image, State: st}
}
