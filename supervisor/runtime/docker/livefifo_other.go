//go:build !linux

package docker

import (
	"context"
	"os"

	"deathwatch/shared"
	"deathwatch/supervisor"
)

// liveFIFO: only a Linux supervisor offers a live FIFO.
type liveFIFO struct{}

// Arm offers no live FIFO here.
func (e *Engine) Arm(context.Context, *supervisor.Box, *shared.Spec) {}

// Ready notes the box's PID 1 (Pin).
func (e *Engine) Ready(ctx context.Context, b *supervisor.Box) { go e.Pin(ctx, b) }

// Release has no live FIFO to drop here.
func (e *Engine) Release(*supervisor.Box) {}

// Sweep has nothing to remove here.
func (e *Engine) Sweep(*supervisor.Box) {}

func (e *Engine) liveDir(string) string    { return "" }
func (e *Engine) dropLive(*supervisor.Box) {}

// LiveRoot: no live FIFO's folder on this system.
const LiveRoot = ""

// LiveRootFor: no live FIFO's folder on this system.
func LiveRootFor(int, string) string { return "" }

// livePass: no live pipe here.
func (e *Engine) livePass(string) (*os.File, func()) { return nil, func() {} }

// giveLive: no live FIFO here.
func (e *Engine) giveLive(context.Context, *apiClient, *supervisor.Box) error { return nil }
