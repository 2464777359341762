package watcher

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestReadWriteFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	want := bytes.Repeat([]byte("0123456789"), 300) // more than one read
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(p, want); err != nil {
		t.Fatal(err)
	}
	got, err := readFile(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("readFile = %d bytes, %v; want the %d written", len(got), err, len(want))
	}
	if _, err := readFile(filepath.Join(t.TempDir(), "missing")); !os.IsNotExist(err) {
		t.Errorf("readFile of a missing file: %v, want a not-exist error", err)
	}
	if err := writeFile(filepath.Join(t.TempDir(), "missing"), want); !os.IsNotExist(err) {
		t.Errorf("writeFile of a missing file: %v, want a not-exist error (it creates nothing)", err)
	}
}
