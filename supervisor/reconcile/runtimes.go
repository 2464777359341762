package reconcile

import (
	"context"

	"deathwatch/supervisor"
)

// What reconcile asks of a runtime beyond supervisor.Runtime. A runtime
// satisfies each by having the method; its test file asserts so
// (var _ reconcile.X = ...).

// NonceReader is a runtime whose boxes carry no nonce label (a sandbox
// has only a name): reconcile reads the nonce from inside the listed box
// instead, and a box whose nonce cannot be read is BLOCKED.
type NonceReader interface {
	ReadNonce(ctx context.Context, b *supervisor.Box) (string, error)
}

// Sweeper is a runtime whose launches leave host objects of their own
// beside the box (docker: a live FIFO's folder) when the supervisor
// dies; reconcile calls Sweep for every journal entry it closes. It is a
// no-op when nothing is left.
type Sweeper interface {
	Sweep(b *supervisor.Box)
}
