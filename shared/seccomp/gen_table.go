//go:build ignore

// gen_table writes table.go, the encoded filters Default returns, from
// Program: `go generate ./shared/seccomp` runs it, and a test fails
// when table.go differs from a fresh compile.
package main

import (
	"fmt"
	"os"

	"deathwatch/shared/seccomp"
)

func main() {
	if err := os.WriteFile("table.go", seccomp.Table(), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "gen_table: %v\n", err)
		os.Exit(1)
	}
}
