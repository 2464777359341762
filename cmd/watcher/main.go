// Command watcher is PID 1 of a deathwatch box. See package watcher.
// Started as the native runtime's box init stage (boxinit.Arg last), it
// builds the box's file system first, then goes on as the watcher; as
// an agent's hold stage (watcher.HoldRequested), it execs the agent
// when the watcher lets it go; as "watcher relay PATH", it carries a
// control stream to a watcher in the unix control mode.
//
// The runtime's container-aware GOMAXPROCS re-reads cgroup files in
// the background; PID 1 of a box has no use for that.

//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"os"

	"deathwatch/shared/boxinit"
	"deathwatch/watcher"
	_ "deathwatch/watcher/oneproc" // GOMAXPROCS 1 before any other init
)

func main() {
	if watcher.RelayRequested(os.Args) {
		os.Exit(watcher.RelayMain(os.Args))
	}
	if watcher.HoldRequested(os.Args) {
		os.Exit(watcher.HoldMain(os.Args))
	}
	args := os.Args[1:]
	if boxinit.Requested(os.Args) {
		var code int
		if args, code = boxinit.Main(os.Args); code != 0 {
			os.Exit(code)
		}
	}
	os.Exit(watcher.Main(args))
}
