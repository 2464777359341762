//go:build !linux

package docker

import (
	"context"

	"deathwatch/supervisor"
)

// takeOwnIDs: an engine on another OS runs its boxes in a VM of its own
// (Docker Desktop), whose ids are not this host's.
func (e *Engine) takeOwnIDs(context.Context, *supervisor.Box) error { return nil }

func (e *Engine) dropOwnIDs(b *supervisor.Box) {}

// daemonIDs: a rootless docker daemon runs on Linux only.
type daemonIDs struct{}

func (e *Engine) settleDaemonIDs(c *apiClient, info *supervisor.Info) {}
