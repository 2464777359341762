// Package idslot hands each box host ids of its own: a slot of a
// reserved block, held by a lock file while the box exists. The native
// runtime maps a box's user namespace onto its slot; an engine whose
// boxes run on the host's own ids (rootful Docker without
// userns-remap), or all on one namespace's (rootless Docker), runs the
// box's agent and watcher as the slot's ids.
package idslot

// A root supervisor's boxes take slots of a block of host ids that no
// account, file or process of the host uses: slot i is the Size ids from
// Base + i·Size. The block starts above where useradd and /etc/subuid
// put anything (below 2^31 by default), and a slot that overlaps a range
// of /etc/subuid, /etc/subgid or an id of /etc/passwd, /etc/group is
// skipped. Every runtime of a root supervisor takes its slots from the
// one folder DefaultDir, so no two live boxes share a host id, native or
// Docker. An unprivileged user's boxes take two-id slots of the user's
// subordinate ids (User), on native and rootless Docker alike.
//
// A slot handed to a new box can own files an old box left on the host
// (in a --mount source); the box's syscall filter refuses set-id modes,
// so such a file gives nobody the new box's ids.
const (
	Base  = 1 << 31
	Size  = 65536
	Slots = 4096 // 2^31 … 2^31+2^28: well inside the 32-bit id space
)

// State is the state key of the box's slot (its first host id),
// journaled so that Remove (and reconcile) releases the slot.
const State = "id-range"

// DefaultDir holds the slot lock files of a root supervisor (tmpfs: a
// reboot frees all). An unprivileged one keeps its own.
const DefaultDir = "/run/deathwatch/idranges"
