package supervisor

// The outcome: how the stream ended, turned into an exit status and reasons.

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"deathwatch/shared"
)

// Reasons of an exit that the supervisor, not the watcher, decided (the
// watcher's are shared.Reason*). An exit event and its journal record
// take their reasons from these and from shared.Reason* alone.
const (
	// ReasonSignaled is the exited event's reason when a signal to the
	// supervisor ended a running box.
	ReasonSignaled = "signaled"
	// ReasonSupervisorSignaled is the journal's reason for the same, and
	// both reasons when the signal came before the box started.
	ReasonSupervisorSignaled = "supervisor-signaled"
)

// streamEnd is how attend's wait ended, as plain data.
type streamEnd struct {
	exit     *shared.Exit // the watcher's exit record, if one came
	ready    bool         // the agent started
	err      error        // the stream broke (nil: EOF or an exit record)
	signal   os.Signal    // the last signal that asked the box to stop
	endedNow bool         // the supervisor ended the box at once
	pastDue  bool         // the host's deadline backstop fired
	// lost is the controller's loss that ended the box (controller-lost
	// or output-lost, "" none), lostWhy how it was lost.
	lost    shared.Reason
	lostWhy string
}

// outcome is the supervisor's verdict on a box that ran.
type outcome struct {
	code          int
	eventReason   string
	journalReason string
	say           string // a line for stderr ("" none)
}

// decide turns how the stream ended into the exit status and reasons.
// Pure: deadline is --deadline, tail the box init's last stderr line.
func decide(e streamEnd, deadline time.Duration, tail string) outcome {
	signaled := func() outcome {
		return outcome{code: signalStatus(e.signal), eventReason: ReasonSignaled, journalReason: ReasonSupervisorSignaled}
	}
	same := func(code int, reason shared.Reason, say string) outcome {
		return outcome{code: code, eventReason: string(reason), journalReason: string(reason), say: say}
	}
	switch {
	case e.lost != "":
		// The controller is gone: whatever the box did after, this ended it.
		return same(shared.ExitControllerLost, e.lost, e.lostWhy+"; the box was ended")
	case e.signal != nil && e.endedNow && (e.exit == nil || e.exit.Reason == shared.ReasonLivenessLost || e.exit.Reason == shared.ReasonStopped):
		// We ended the box on a second signal: its liveness loss is ours,
		// and so is the stop the first signal asked for (the watcher
		// keeps that reason when the stream's end then kills the box).
		return signaled()
	case e.exit != nil:
		say := ""
		switch e.exit.Reason {
		case shared.ReasonDeadline:
			say = fmt.Sprintf("the deadline (%s) passed; the agent was stopped", deadline)
		case shared.ReasonOOM:
			say = "the box ran out of memory: the kernel killed the agent (OOM); raise --memory or make the agent use less"
		case shared.ReasonLivenessLost:
			// The watcher's own stderr says what it missed; the host
			// says only that the watcher ended the box.
			say = "liveness lost: the watcher ended the box"
		case shared.ReasonSetupFailed, shared.ReasonVerifyFailed, shared.ReasonCopyRefused:
			say = e.exit.Message
			if say == "" {
				say = string(e.exit.Reason)
			}
		}
		return same(e.exit.Code, e.exit.Reason, say)
	case e.signal != nil:
		return signaled()
	case e.pastDue:
		return same(shared.ExitDeadline, shared.ReasonDeadline,
			fmt.Sprintf("the box outlived its deadline (%s) by more than grace + 10s; it was ended", deadline))
	case e.ready:
		why := "the control stream ended without an exit record"
		if e.err != nil {
			why = fmt.Sprintf("the control stream broke: %v", e.err)
		}
		return same(shared.ExitLivenessLost, shared.ReasonLivenessLost, why)
	default:
		why := "the box ended before the agent started"
		if e.err != nil {
			why += fmt.Sprintf(" (%v)", e.err)
		}
		if tail != "" {
			why += ": " + tail
		}
		return same(shared.ExitSetupFailed, shared.ReasonSetupFailed, why)
	}
}

func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return shared.SignalStatus(int(n))
	}
	return shared.SignalStatus(int(syscall.SIGTERM))
}

// tailWriter forwards to w and remembers the last non-empty line. What
// it forwards is the box init's and the watcher's own stderr, from
// inside the box: every line goes out shared.Printable.
type tailWriter struct {
	mu   sync.Mutex
	w    io.Writer
	cur  []byte
	last string
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	for _, c := range p {
		if c == '\n' {
			if s := strings.TrimSpace(string(t.cur)); s != "" {
				t.last = s
			}
			t.cur = t.cur[:0]
			continue
		}
		if len(t.cur) < 4096 {
			t.cur = append(t.cur, c)
		}
	}
	t.mu.Unlock()
	if t.w == nil {
		return len(p), nil
	}
	parts := strings.Split(string(p), "\n")
	for i, part := range parts {
		parts[i] = shared.Printable(part)
	}
	if _, err := io.WriteString(t.w, strings.Join(parts, "\n")); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Last is the last complete (or pending) non-empty line.
func (t *tailWriter) Last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := strings.TrimSpace(string(t.cur)); s != "" {
		return s
	}
	return t.last
}
