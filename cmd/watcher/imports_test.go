package main

import (
	"os/exec"
	"strings"
	"testing"
)

// forbidden are packages the PID-1 binary must not pull in: they bloat
// it, widen what runs as PID 1, or belong to the supervisor side. An
// entry ending in "/" forbids every package under that path.
var forbidden = []string{
	"github.com/alecthomas/kong/",
	"github.com/containerd/cgroups/",
	"net/http",
	"net",
	"encoding/json",
	"log/slog",
	"os/exec",
}

func isForbidden(dep string) bool {
	for _, f := range forbidden {
		if dep == strings.TrimSuffix(f, "/") || (strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f)) {
			return true
		}
	}
	return false
}

// TestImportFence fails when cmd/watcher depends, directly or not, on a
// forbidden package.
func TestImportFence(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "deathwatch/cmd/watcher").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps deathwatch/cmd/watcher: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 5 {
		t.Fatalf("go list -deps printed only %d packages: %q", len(deps), deps)
	}
	for _, dep := range deps {
		if isForbidden(dep) {
			t.Errorf("cmd/watcher depends on %s; keep it out of the PID-1 binary (find the importer with `go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/watcher`)", dep)
		}
	}
	t.Logf("cmd/watcher has %d packages in its dependency closure", len(deps))
}

// TestImportFenceMatches checks the matcher on names that look alike.
func TestImportFenceMatches(t *testing.T) {
	for dep, want := range map[string]bool{
		"net": true, "net/http": true, "net/netip": false, "net/url": false, "encoding/json": true,
		"github.com/alecthomas/kong": true, "github.com/containerd/cgroups/v3/cgroup1": true,
		"os/exec": true, "os": false, "log/slog": true, "log": false, "golang.org/x/sys/unix": false,
	} {
		if got := isForbidden(dep); got != want {
			t.Errorf("%s: forbidden = %v, want %v", dep, got, want)
		}
	}
}
