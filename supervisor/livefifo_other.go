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
func liveRoot() string                    { return "" }

// LiveRoot: no live FIFO's folder on this system.
const LiveRoot = ""

// LiveRootFor: no live FIFO's folder on this system.
func LiveRootFor(int, string) string { return "" }
