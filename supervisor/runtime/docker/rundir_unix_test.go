//go:build unix

package docker

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"deathwatch/supervisor"
)

// TestDropRunDirs: Remove drops the box's own cidfile folders, and
// follows no link another user planted under the same name (its target
// stays whole), nor touches another box's folder.
func TestDropRunDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	b := &supervisor.Box{Name: "dw-20261201-000000-0c3ec169"}
	mine, err := os.MkdirTemp("", runDirPattern(b))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(mine, "cid"), []byte("x"), 0o644)
	victim := t.TempDir()
	os.WriteFile(filepath.Join(victim, "keep"), []byte("x"), 0o644)
	if err := os.Symlink(victim, filepath.Join(tmp, "dw-run-"+b.Name+"-planted")); err != nil {
		t.Fatal(err)
	}
	other, _ := os.MkdirTemp("", runDirPattern(&supervisor.Box{Name: "dw-other"}))

	dropRunDirs(b)
	if _, err := os.Lstat(mine); !os.IsNotExist(err) {
		t.Errorf("the box's cidfile folder is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(victim, "keep")); err != nil {
		t.Errorf("a planted link's target was touched: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(tmp, "dw-run-"+b.Name+"-planted")); err != nil {
		t.Errorf("the planted link itself was removed: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another box's folder was removed: %v", err)
	}
}

// TestRemoveDropsRunDir: Remove of a podman box the engine no longer
// has (its --rm removed it after a killed supervisor) still drops the
// box's cidfile folder; reconcile calls it for such a box, since the
// folder is in no listing (the descriptor's UnlistedRemains).
func TestRemoveDropsRunDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	// A podman that knows no box: every call lists nothing.
	bin := filepath.Join(t.TempDir(), "podman")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &supervisor.Box{Name: "dw-20261201-000000-5e1a2b3c"}
	dir, err := os.MkdirTemp("", runDirPattern(b))
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{Kind: "podman", Bin: bin, EngineEnv: []string{"XDG_RUNTIME_DIR=" + tmp, "CONTAINER_HOST=", "PATH=/usr/bin:/bin"}}
	if err := e.Remove(context.Background(), b); err != nil {
		t.Fatalf("remove a box podman no longer has: %v", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("the box's cidfile folder is still there after Remove: %v", err)
	}
	if d, _ := supervisor.Lookup("podman"); !d.Has(supervisor.CapUnlistedRemains) {
		t.Errorf("podman's descriptor does not say its boxes leave remains no listing shows: reconcile would not call Remove for a box podman removed")
	}
}

// TestRemoveDropsOwnRunDir: Remove of a box this process ran drops the
// cidfile folder the run made, which it knows, without looking for
// folders of the box's name in the temporary folder.
func TestRemoveDropsOwnRunDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	bin := filepath.Join(t.TempDir(), "podman")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &supervisor.Box{Name: "dw-20261201-000000-7a1b2c3d"}
	own := filepath.Join(t.TempDir(), "own") // named unlike the pattern: only the run knows it
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(own, "cid"), []byte("x"), 0o644)
	e := &Engine{Kind: "podman", Bin: bin, EngineEnv: []string{"XDG_RUNTIME_DIR=" + tmp, "CONTAINER_HOST=", "PATH=/usr/bin:/bin"}}
	e.runs = map[string]*runEnd{b.Name: {exited: make(chan struct{}), read: make(chan struct{}), err: new(error), stderr: &heldWriter{}, dir: own}}
	if err := e.Remove(context.Background(), b); err != nil {
		t.Fatalf("remove a box podman no longer has: %v", err)
	}
	if _, err := os.Lstat(own); !os.IsNotExist(err) {
		t.Errorf("the run's cidfile folder is still there after Remove: %v", err)
	}
	if e.runs[b.Name] != nil {
		t.Errorf("Remove kept the run")
	}
}
