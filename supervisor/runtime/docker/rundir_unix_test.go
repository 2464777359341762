//go:build unix

package docker

import (
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
