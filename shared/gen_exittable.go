//go:build ignore

// gen_exittable writes ExitTable into the README between its exit-table
// lines: `go generate ./shared` runs it.
package main

import (
	"fmt"
	"os"

	"deathwatch/shared"
)

func main() {
	const readme = "../README.md"
	doc, err := os.ReadFile(readme)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen_exittable: %v\n", err)
		os.Exit(1)
	}
	out, err := shared.ReplaceExitTable(string(doc))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen_exittable: %s: %v\n", readme, err)
		os.Exit(1)
	}
	if err := os.WriteFile(readme, []byte(out), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "gen_exittable: %v\n", err)
		os.Exit(1)
	}
}
