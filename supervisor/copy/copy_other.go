//go:build !linux

package copy

import (
	"context"
	"errors"

	"deathwatch/shared"
)

const copySupported = false

func (c *Copies) sendIn(w *shared.Writer) error {
	close(c.inDone)
	return errors.New("copy-in needs Linux")
}

func (c *Copies) frame(f shared.Frame) error {
	return &shared.ProtocolError{Reason: "copy-out frame on a supervisor without copies"}
}

func (t *exportTree) close() {}

type archived struct{}

type manifestTree struct{}

func (c *Copies) canStageArchive(context.Context) bool { return false }

func (c *Copies) archiveOut(context.Context) bool { return false }

func (c *Copies) stopFetch() {}
