//go:build unix

package trusted

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestCheckTrustedDir(t *testing.T) {
	base := t.TempDir() // 0700, ours, below a root-owned sticky /tmp (or our own temp folder)
	own := filepath.Join(base, "own")
	if err := EnsureDir(own); err != nil {
		t.Fatalf("a fresh folder of our own: %v", err)
	}
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	if err := CheckDir(open); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("a 0777 journal folder: %v", err)
	}
	below := filepath.Join(open, "j")
	os.Mkdir(below, 0o700)
	if err := CheckDir(below); err == nil || !strings.Contains(err.Error(), "on the path") {
		t.Errorf("a folder below a 0777 one (not sticky): %v", err)
	}
	link := filepath.Join(base, "link")
	os.Symlink(own, link)
	if err := CheckDir(link); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Errorf("a symlink to our folder: %v", err)
	}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(base, "theirs")
		os.Mkdir(theirs, 0o700)
		os.Chown(theirs, 4321, 4321)
		if err := CheckDir(theirs); err == nil || !strings.Contains(err.Error(), "owned by uid 4321") {
			t.Errorf("another user's folder: %v", err)
		}
	}
}

func TestReadTrustedFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "e.json")
	os.WriteFile(p, []byte(`{}`), 0o600)
	if b, err := ReadFile(p, 100); err != nil || string(b) != "{}" {
		t.Fatalf("a regular file: %q %v", b, err)
	}
	if _, err := ReadFile(p, 1); err == nil {
		t.Errorf("a file over the limit was read")
	}
	os.Symlink(p, filepath.Join(dir, "l.json"))
	if _, err := ReadFile(filepath.Join(dir, "l.json"), 100); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a symlink: %v", err)
	}
	fifo := filepath.Join(dir, "f.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadFile(fifo, 100); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("a FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO named .json blocked")
	}
}
