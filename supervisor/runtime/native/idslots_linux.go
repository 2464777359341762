package native

import (
	"deathwatch/shared"
	"deathwatch/supervisor/idslot"
)

// A root supervisor maps each box's user namespace onto a slot of the
// reserved block (package idslot): box id i is host id IDRangeBase +
// slot·IDRangeSize + i.
//
// An unprivileged supervisor's boxes share its subordinate range
// (/etc/subuid, /etc/subgid), so each takes a slot of RootlessSlotIDs
// ids there, the same way: the agent's uid and the watcher's (65533)
// are mapped onto the slot's two host ids, the caller's own id onto
// the box's root, and nothing else. Two boxes of one user never share a
// host id, so one's agent can neither signal, trace nor read /proc of
// the other's, nor open the files it made.
const (
	IDRangeBase = idslot.Base
	IDRangeSize = idslot.Size
	// RootlessSlotIDs is the size of an unprivileged box's slot: the
	// agent's host id and the watcher's.
	RootlessSlotIDs = idslot.UserSlotIDs
	// StateIDRange is the box's slot, journaled so that Remove (and
	// reconcile) releases it.
	StateIDRange = idslot.State
	// DefaultIDRangeDir holds the slot lock files of a root supervisor.
	// An unprivileged one keeps them next to its native state
	// (RootlessIDSlotDir).
	DefaultIDRangeDir = idslot.DefaultDir
)

// idTriple is one line of a uid or gid map: the box's first id, the
// host's, and how many.
type idTriple struct{ box, host, count int64 }

// rootlessMaps are the uid and gid maps of an unprivileged box whose
// slot of r starts at host uid start: the caller (self) is the box's
// root, and the agent's and the watcher's ids take the slot's two host
// ids. No other id exists in the box.
func rootlessMaps(r *idslot.Ranges, start int64, selfUID, selfGID int, agentUID, agentGID uint32) (uids, gids []idTriple) {
	g := r.GIDStart(start)
	return []idTriple{{0, int64(selfUID), 1}, {int64(agentUID), start, 1}, {shared.DefaultWatcherUID, start + 1, 1}},
		[]idTriple{{0, int64(selfGID), 1}, {int64(agentGID), g, 1}, {shared.DefaultWatcherGID, g + 1, 1}}
}
