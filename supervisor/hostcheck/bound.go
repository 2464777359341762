package hostcheck

import (
	"deathwatch/supervisor/internal/survival"
	"time"
)

// What ends the boxes of a frozen controller (DoctorBound.Frozen).
const (
	FrozenHeartbeat = "heartbeat" // the watcher's heartbeat: within FrozenWithinNS
	FrozenDeadline  = "deadline"  // no heartbeat: the box's deadline
	FrozenNever     = "never"     // neither: the box lives on
)

// DoctorBound is how long a box can outlive its controller with the
// controller's settings on this host, in numbers. A dead controller's
// boxes die within SlackNS (the kill chain as the proof measured it, or
// the runtime's dead bound); a frozen one's as Frozen says; a failed
// watch ends at the deadline plus the grace.
type DoctorBound struct {
	Frozen         string `json:"frozen"`
	FrozenWithinNS int64  `json:"frozen_within_ns,omitempty"` // heartbeat + slack; Frozen "heartbeat" only
	HeartbeatNS    int64  `json:"heartbeat_ns"`               // 0: off
	SlackNS        int64  `json:"slack_ns"`
	DeadlineNS     int64  `json:"deadline_ns"` // 0: off
	GraceNS        int64  `json:"grace_ns"`
	// FailedWithinNS is when a failed watch ends: deadline + grace; 0:
	// never (no deadline).
	FailedWithinNS int64 `json:"failed_within_ns,omitempty"`
	// Measured says whether SlackNS is the proof's measure, not the
	// runtime's default bound.
	Measured bool `json:"measured"`
}

// survivalBound is s with slack as a DoctorBound.
func survivalBound(s survival.Limits, slack time.Duration, measured bool) DoctorBound {
	b := DoctorBound{HeartbeatNS: int64(s.Heartbeat), SlackNS: int64(slack), DeadlineNS: int64(s.Deadline), GraceNS: int64(s.Grace), Measured: measured}
	switch {
	case s.Heartbeat > 0:
		b.Frozen, b.FrozenWithinNS = FrozenHeartbeat, int64(s.Heartbeat+slack)
	case s.Deadline > 0:
		b.Frozen = FrozenDeadline
	default:
		b.Frozen = FrozenNever
	}
	if s.Deadline > 0 {
		b.FailedWithinNS = int64(s.Deadline + s.Grace)
	}
	return b
}
