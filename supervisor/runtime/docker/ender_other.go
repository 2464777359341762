//go:build !linux

package docker

import (
	"context"

	"deathwatch/supervisor"
)

// pinnedInit has nothing to hold where a box's processes are not the
// supervisor's to see (Docker Desktop's VM).
type pinnedInit struct{}

// Pin does nothing here: the box runs in the engine's VM.
func (e *Engine) Pin(context.Context, *supervisor.Box) {}

// End does nothing here: only the engine can end the box.
func (e *Engine) End(*supervisor.Box) (string, error) { return "", nil }
