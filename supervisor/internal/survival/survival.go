// Package survival states how long a box can outlive its controller
// with a launch's heartbeat, deadline and grace.
package survival

import (
	"fmt"
	"time"
)

// Limits is how long a box can outlive its controller with the given
// bounds (0: off): a killed controller's box ends within the runtime's
// own dead bound; a frozen controller's within Heartbeat plus that
// bound; a box whose watch failed at Deadline + Grace.
type Limits struct {
	Heartbeat, Deadline, Grace time.Duration
}

// Unbounded: nothing but the controller's death ends the box.
func (s Limits) Unbounded() bool { return s.Heartbeat <= 0 && s.Deadline <= 0 }

// Statement says the bounds in a line, slack being the runtime's
// measured or default dead bound.
func (s Limits) Statement(slack time.Duration) string {
	var frozen, failed string
	switch {
	case s.Heartbeat > 0:
		frozen = fmt.Sprintf("a frozen controller's boxes die within %v + %v", s.Heartbeat, slack)
	case s.Deadline > 0:
		frozen = "a frozen controller's boxes live until the deadline (no heartbeat)"
	default:
		frozen = "a frozen controller's boxes live for ever (no heartbeat, no deadline)"
	}
	if s.Deadline > 0 {
		failed = fmt.Sprintf("a failed watch ends at %v + %v", s.Deadline, s.Grace)
	} else {
		failed = "a failed watch never ends (no deadline)"
	}
	return frozen + "; " + failed
}

// Warning is the line exec prints when a bound is off, "" when none is.
func (s Limits) Warning() string {
	switch {
	case s.Unbounded():
		return "warning: --heartbeat 0 and --deadline 0: nothing but the supervisor's death ends this box; a frozen supervisor leaves it running for ever"
	case s.Heartbeat <= 0:
		return fmt.Sprintf("warning: --heartbeat 0: a frozen supervisor leaves this box running until its deadline (%v)", s.Deadline)
	}
	return ""
}
