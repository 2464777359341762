package shared

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hashAhead runs a LandingSums pass over box/stage (one root) and stops
// it once it has nothing left to do.
func hashAhead(t *testing.T, box string) *LandingSums {
	t.Helper()
	root, err := unix.Open(box, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	l := &LandingSums{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); l.Run(stop, root, "stage", 1) }()
	time.Sleep(100 * time.Millisecond) // passes repeat; the first does all there is
	close(stop)
	<-done
	return l
}

func statOf(t *testing.T, p string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// TestLandingSums: a file is hashed ahead once a later name beside it
// has landed (the engine is done with it), never the last name of a
// root nor a file with a block of zeros; its digest is given only for
// the same file unchanged.
func TestLandingSums(t *testing.T) {
	box := t.TempDir()
	r0 := filepath.Join(box, "stage/0")
	os.MkdirAll(filepath.Join(r0, "d"), 0o755)
	os.WriteFile(filepath.Join(r0, "a"), []byte("alpha"), 0o644)
	os.WriteFile(filepath.Join(r0, "d/b"), []byte("beta"), 0o644)
	os.WriteFile(filepath.Join(r0, "d/c"), []byte("gamma"), 0o644) // the last of d, d not complete
	os.WriteFile(filepath.Join(r0, "m"), append([]byte("x"), make([]byte, 8192)...), 0o644)
	os.WriteFile(filepath.Join(r0, "z"), []byte("last"), 0o644) // the root's last name
	l := hashAhead(t, box)
	h := NewSHA256()
	h.Write([]byte("alpha"))
	if got := l.Sum("0/a", statOf(t, filepath.Join(r0, "a"))); !bytes.Equal(got, h.Sum(nil)) {
		t.Errorf("0/a: hashed ahead %x, want %x", got, h.Sum(nil))
	}
	for p, want := range map[string]bool{"0/d/b": true, "0/d/c": true, "0/m": false, "0/z": false} {
		if got := l.Sum(p, statOf(t, filepath.Join(box, "stage", p))) != nil; got != want {
			t.Errorf("%s: hashed ahead %v, want %v", p, got, want)
		}
	}
	// Changed in place, same size, a clock tick later: read again.
	time.Sleep(20 * time.Millisecond)
	os.WriteFile(filepath.Join(r0, "a"), []byte("alphA"), 0o644)
	if l.Sum("0/a", statOf(t, filepath.Join(r0, "a"))) != nil {
		t.Errorf("0/a changed after it was hashed ahead, and its old digest was given")
	}
	t.Logf("hashed ahead: %d files, %d bytes", l.Files, l.Bytes)
}

// TestLandedHashedAhead: Landed with digests hashed ahead passes what
// landed as sent, and fails a file changed after it was hashed ahead.
func TestLandedHashedAhead(t *testing.T) {
	mk := func(root string) {
		os.MkdirAll(filepath.Join(root, "d"), 0o755)
		os.WriteFile(filepath.Join(root, "a"), []byte("alpha"), 0o644)
		os.WriteFile(filepath.Join(root, "d/b"), []byte("beta"), 0o600)
		os.WriteFile(filepath.Join(root, "d/c"), []byte("gamma"), 0o600)
		os.WriteFile(filepath.Join(root, "z"), []byte("last"), 0o644)
	}
	src := t.TempDir()
	mk(filepath.Join(src, "t"))
	var want CopyEnd
	sfd, _ := unix.Open(src, unix.O_PATH|unix.O_DIRECTORY, 0)
	defer unix.Close(sfd)
	s := &CopySender{Frames: CopyInFrames, Send: func(ft FrameType, p []byte) error {
		if ft == FrameCopyInEnd {
			want, _ = ParseCopyEnd(p)
		}
		return nil
	}}
	if err := s.SendTree(0, sfd, "t"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		tamper func(root string)
		ok     bool
	}{
		{"as sent", func(string) {}, true},
		{"changed after", func(root string) { os.WriteFile(filepath.Join(root, "a"), []byte("alphA"), 0o644) }, false},
		{"replaced after", func(root string) {
			os.Remove(filepath.Join(root, "d/b"))
			os.WriteFile(filepath.Join(root, "d/b"), []byte("bet4"), 0o600)
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			box := t.TempDir()
			mk(filepath.Join(box, "stage/0"))
			l := hashAhead(t, box)
			if l.Files < 2 {
				t.Fatalf("hashed ahead %d files, want a and d/b at least", l.Files)
			}
			time.Sleep(20 * time.Millisecond) // a clock tick later
			c.tamper(filepath.Join(box, "stage/0"))
			root, _ := unix.Open(box, unix.O_PATH|unix.O_DIRECTORY, 0)
			defer unix.Close(root)
			stage, _ := unix.Open(filepath.Join(box, "stage"), unix.O_PATH|unix.O_DIRECTORY, 0)
			defer unix.Close(stage)
			r := &CopyReceiver{Root: root, Bases: []string{"work/t"}, Landing: l}
			err := r.Landed(0, stage, "0", want)
			var verr *VerifyError
			if c.ok != (err == nil) || (!c.ok && !errors.As(err, &verr)) {
				t.Fatalf("Landed: %v (want ok %v, else a VerifyError)", err, c.ok)
			}
			if c.ok {
				if l.Used < 2 {
					t.Errorf("the verification used %d digests hashed ahead, want 2 at least", l.Used)
				}
				if b, _ := os.ReadFile(filepath.Join(box, "work/t/a")); string(b) != "alpha" {
					t.Errorf("work/t/a = %q", b)
				}
			}
		})
	}
}
