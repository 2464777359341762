// Command watcher is PID 1 of a deathwatch box. See package watcher.
//
// The runtime's container-aware GOMAXPROCS re-reads cgroup files in
// the background; PID 1 of a box has no use for that.

//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"os"

	"deathwatch/watcher"
)

func main() { os.Exit(watcher.Main(os.Args[1:])) }
