// Command supervisor is the host half of deathwatch: it runs one agent
// command in a box end to end (exec), lists boxes (ls), and prints its
// version. All logic lives in package supervisor.
package main

import (
	"os"

	"deathwatch/supervisor"
)

func main() { os.Exit(supervisor.Main(os.Args[1:])) }
