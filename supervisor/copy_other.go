//go:build !linux

package supervisor

import (
	"context"
	"errors"

	"deathwatch/shared"
)

const copySupported = false

func (c *copies) sendIn(w *shared.Writer) error {
	close(c.inDone)
	return errors.New("copy-in needs Linux")
}

func (c *copies) frame(f shared.Frame) error {
	return &shared.ProtocolError{Reason: "copy-out frame on a supervisor without copies"}
}

func (t *exportTree) close() {}

type archived struct{}

type manifestTree struct{}

func (l *launch) canStageArchive(context.Context) bool { return false }

func (l *launch) archiveOut(context.Context) bool { return false }

func (c *copies) stopFetch() {}
