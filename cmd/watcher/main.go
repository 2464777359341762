// Command watcher is PID 1 of a deathwatch box. See package watcher.
package main

import (
	"os"

	"deathwatch/watcher"
)

func main() { os.Exit(watcher.Main(os.Args[1:])) }
