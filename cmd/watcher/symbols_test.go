package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// forbiddenSymbols are functions the PID-1 binary must not link, though
// their packages are in it: each pulls in code that every box then holds
// resident (the binary is mapped in whole). os.FileInfo (os.ReadFile,
// File.Stat, os.Stat) links time.Local's zone loader and, through
// time.Time in an interface, time's formatter: the watcher reads files
// with its own readFile and stats with syscall.
var forbiddenSymbols = []string{
	"time.initLocal",
	"time.LoadLocationFromTZData",
	"time.Time.appendFormat",
}

// TestSymbolFence builds cmd/watcher as the Makefile does, symbols kept,
// and fails when it links a forbidden function.
func TestSymbolFence(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "watcher")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "deathwatch/cmd/watcher")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	linked := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 3 {
			linked[f[len(f)-1]] = true
		}
	}
	if !linked["main.main"] {
		t.Fatalf("go tool nm printed no main.main: %.200q", out)
	}
	for _, s := range forbiddenSymbols {
		if linked[s] {
			t.Errorf("cmd/watcher links %s; find the caller with `go build -ldflags=-dumpdep ./cmd/watcher 2>&1 | grep -e '-> %s$'`", s, s)
		}
	}
}
