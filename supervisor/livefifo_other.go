//go:build !linux

package supervisor

import "context"

// liveFIFO: only a Linux supervisor offers a live FIFO.
type liveFIFO struct{}

func (l *launch) armLive(context.Context) {}
func (lf *liveFIFO) close()               {}
func (lf *liveFIFO) unlink()              {}
func (lf *liveFIFO) remove()              {}
func removeLiveDir(string)                {}
func dropStaleProbes(string)              {}

// LiveRoot: no live FIFO's folder on this system.
const LiveRoot = ""
