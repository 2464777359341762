// Package oneproc gives the watcher's runtime one P (GOMAXPROCS 1), as
// early as a Go program can: it imports nothing but the runtime, and
// packages are initialized in dependency order, then by import path, so
// its init runs before any other package's of the binary. Only
// cmd/watcher imports it.
//
// PID 1 waits nearly all the time and never has two things to compute
// at once. A second P keeps an idle thread, a per-P cache of spans, and
// wakes a spinning thread for every goroutine made; once it has cached
// spans, taking it away hands them to the heap's central lists, so the
// earlier the better. (GOMAXPROCS=1 in the environment would spare the
// P altogether, but the plain watcher's environment is the agent's.)
package oneproc

import "runtime"

func init() { runtime.GOMAXPROCS(1) }
