// Package oneproc gives the watcher's runtime one P (GOMAXPROCS 1), as
// early as a Go program can: it imports nothing but the runtime, and
// packages are initialized in dependency order, then by import path, so
// its init runs before any other package's of the binary (the runtime's
// own aside). Only cmd/watcher imports it.
//
// PID 1 waits nearly all the time and never has two things to compute
// at once. A second P keeps a thread that idles for good (its stacks), a
// per-P cache with spans of its own, and wakes a spinning thread for
// every goroutine made. The runtime makes the second P and starts a
// thread for it before any init, so the earlier the better: once that
// P has cached spans, taking it away hands them to the central lists,
// whose blocks come off the heap: the call is in this package's init,
// ahead of main.
// GOMAXPROCS=1 in the environment would spare the second P altogether,
// but the plain watcher's environment is the agent's.
package oneproc

import "runtime"

func init() { runtime.GOMAXPROCS(1) }
