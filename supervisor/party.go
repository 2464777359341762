package supervisor

import (
	"context"
	"log/slog"
	"time"

	"deathwatch/shared"
)

// Party is a feature that rides on the control stream beside the
// lifecycle (copy-in and copy-out: supervisor/copy). The lifecycle
// calls every party of ExecOptions.Parties at fixed points, in this
// order, and never learns what a party does:
//
//	Check, Spec          before anything exists (a refusal creates nothing)
//	Created              the box exists, not started
//	Sent                 hello and spec are on the stream
//	Ready                the agent started
//	Frame                a frame from the box the lifecycle does not own
//	End                  the stream ended
//
// Busy is asked whenever the host's deadline backstop fires.
type Party interface {
	// Check refuses what the party cannot do (an error with its exit
	// status: exitcode.Usage, exitcode.Refused).
	Check() error
	// Spec adds what the party asks of the watcher to the spec, before
	// the spec is validated.
	Spec(s *shared.Spec)
	// Created tells the party the launch it belongs to, once the box
	// exists and before it starts; it may add to the spec again.
	Created(ctx context.Context, l *PartyLaunch, s *shared.Spec)
	// Sent is called once hello and spec are on the stream; w sends
	// frames to the box, ctx ends with the stream. It must not block.
	Sent(ctx context.Context, w *shared.Writer)
	// Ready is called once the agent started.
	Ready()
	// Frame offers a frame the lifecycle does not own: handled false
	// says it is not the party's; an error is a protocol error (the
	// stream is closed: fail closed).
	Frame(f shared.Frame) (handled bool, err error)
	// Busy reports whether the party moved data within d: the box is
	// not past its deadline while it does.
	Busy(d time.Duration) bool
	// End is called once the stream ended; exited says the watcher sent
	// its exit record after the agent started. A verdict replaces the
	// launch's outcome (nil: it stands).
	End(exited bool) *Verdict
}

// PartyLaunch is what a party sees of the launch it rides on.
type PartyLaunch struct {
	Box     *Box
	Runtime Runtime
	// OneStep: the runtime's one engine client created and started the
	// box (OneStepStarter).
	OneStep bool
	Log     *slog.Logger
	// Say writes one line of the supervisor's own to its stderr.
	Say func(format string, args ...any)
	// Emit sends a lifecycle event (the launch's identity is filled in).
	Emit func(Event)
}

// Verdict is a party's word on how a launch ended.
type Verdict struct {
	Code   int
	Reason shared.Reason
	Say    string // a line for stderr ("" none)
}
