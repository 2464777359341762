// Command watcher is PID 1 of a deathwatch box. See package watcher.
// Started as the native runtime's box init stage (boxinit.Arg last), it
// builds the box's file system first, then goes on as the watcher.
//
// The runtime's container-aware GOMAXPROCS re-reads cgroup files in
// the background; PID 1 of a box has no use for that.

//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"os"
	"runtime"

	"deathwatch/shared/boxinit"
	"deathwatch/watcher"
)

func main() {
	// One P: PID 1 waits nearly all the time and never has two things
	// to compute at once. A second P keeps a thread that idles for good
	// (its stacks), a cache with spans of its own, and wakes a spinning
	// thread for every goroutine made: ~110 KiB of the idle watcher's
	// memory in control mode (6 threads -> 4). A thread blocked in a
	// system call still gets its P taken over by another. Here, first:
	// later, the runtime would have more to hand back (each span the
	// second P's cache held takes a block of the central lists' off the
	// heap, ~170 KiB measured after the agent's start). GOMAXPROCS=1 in
	// the environment would do better still (the runtime makes the
	// second P and its thread before main), but the plain watcher's
	// environment is the agent's.
	runtime.GOMAXPROCS(1)
	args := os.Args[1:]
	if boxinit.Requested(os.Args) {
		var code int
		if args, code = boxinit.Main(os.Args); code != 0 {
			os.Exit(code)
		}
	}
	os.Exit(watcher.Main(args))
}
