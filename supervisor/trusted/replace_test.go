package trusted

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReplaceFile: the file takes the place of an existing one and of
// a missing one, and the temporary name is gone either way.
func TestReplaceFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "entry.json")
	for i, want := range []string{"first", "second", "third"} {
		tmp := filepath.Join(dir, ".entry.json.tmp")
		if err := os.WriteFile(tmp, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := ReplaceFile(tmp, p); err != nil {
			t.Fatalf("replace %d: %v", i, err)
		}
		if got, err := os.ReadFile(p); err != nil || string(got) != want {
			t.Fatalf("replace %d: %s holds %q (%v), want %q", i, p, got, err, want)
		}
		if _, err := os.Lstat(tmp); !os.IsNotExist(err) {
			t.Fatalf("replace %d: the temporary file is still there (%v)", i, err)
		}
	}
	if des, _ := os.ReadDir(dir); len(des) != 1 {
		t.Fatalf("the folder holds %d files, want the entry alone", len(des))
	}
	if err := ReplaceFile(filepath.Join(dir, "missing"), p); err == nil {
		t.Fatal("a missing temporary file replaced the entry")
	}
	if got, _ := os.ReadFile(p); string(got) != "third" {
		t.Fatalf("a failed replace changed the entry to %q", got)
	}
}
