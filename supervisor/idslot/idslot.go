// Package idslot hands each box host ids of its own: a slot of a
// reserved block, held by a lock file while the box exists. The native
// runtime maps a box's user namespace onto its slot; an engine whose
// boxes run on the host's own ids (rootful Docker without
// userns-remap), or all on one namespace's (rootless Docker), runs the
// box's agent and watcher as the slot's ids.
package idslot

// A root supervisor's boxes take slots of a dedicated block of host ids
// that no account, file or process of the host uses: slot i is host ids
// Base + i·Size …, Size ids. The block starts at 2^31, above where
// useradd and /etc/subuid put anything (both stay below 2^31 by
// default), and slots that overlap a range in /etc/subuid, /etc/subgid
// or an id in /etc/passwd, /etc/group are skipped. A slot is held by a
// lock file (created O_EXCL) while the box exists, so two live boxes
// never share a host uid; the runtime's Remove (and so reconcile)
// releases it. Every runtime of a root supervisor takes its slots from
// the one folder DefaultDir, so a native box and a Docker box never
// share ids either. An unprivileged user's boxes take two-id slots of
// the user's subordinate ids (User) from one folder of the user's, on
// the native runtime and on rootless Docker (whose daemon's namespace
// maps those ids) alike.
//
// The lock file names the box, the supervisor that took it and, once
// recorded, the box's init (each as pid and start time). A slot whose
// supervisor and init are both provably gone (a SIGKILLed supervisor
// whose journal entry was never reconciled) is taken back by the next
// allocation: its box cannot run, since the init is PID 1 of the box
// and it was never started, or has ended. A box whose init an engine
// starts (Docker) has an engine-held slot instead (EngineHeld): once
// its supervisor is gone it is taken back only when the engine no
// longer has the box.
//
// A slot handed to a new box can own files an old box left on the host
// (in a --mount source). Those files cannot be set-id: the box's syscall
// filter refuses set-id modes, so a file of the old box gives nobody the
// new box's ids.
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
