package shared

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestReadDirNames(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := 0; i < 300; i++ { // more than one getdents buffer
		n := "file-with-a-long-name-to-fill-the-buffer-" + itoa(i)
		want = append(want, n)
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadDirNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ReadDirNames listed %d names, want %d (no . or ..)", len(got), len(want))
	}
	if _, err := ReadDirNames(filepath.Join(dir, want[0])); err == nil {
		t.Errorf("ReadDirNames of a file: no error")
	}
}

// TestRemoveAll: a tree goes whole; a symlink in it goes, not what it
// points to; a missing path is no error.
func TestRemoveAll(t *testing.T) {
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "stage")
	for _, d := range []string{"a/b/c", "a/empty", "d"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a/b/c/f", "a/g", "h"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("y"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "a/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "d"), 0o500); err != nil { // root removes it anyway; others cannot
		t.Fatal(err)
	}
	err := RemoveAll(root)
	if os.Geteuid() != 0 {
		_ = os.Chmod(filepath.Join(root, "d"), 0o755)
		err = RemoveAll(root)
	}
	if err != nil {
		t.Fatalf("RemoveAll: %v", err)
	}
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Errorf("%s is still there (%v)", root, err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("RemoveAll followed a symlink out of the tree: %v", err)
	}
	if err := RemoveAll(root); err != nil {
		t.Errorf("RemoveAll of a missing path: %v", err)
	}
	file := filepath.Join(outside, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(file); err != nil {
		t.Errorf("RemoveAll of a file: %v", err)
	}
}
