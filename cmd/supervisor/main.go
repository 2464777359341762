// Command supervisor is the host half of deathwatch: it runs one agent
// command in a box end to end (exec), lists and reconciles boxes, proves
// the death-watch and checks the host. All logic lives in
// deathwatch/supervisor and its packages; the CLI is supervisor/cli.
package main

import (
	"os"

	"deathwatch/supervisor/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
