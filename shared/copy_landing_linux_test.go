package shared

import (
	"bytes"
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

// TestLandingSumsFinish: once the put is over, Finish hashes what the
// passes left (a root's last name) on its workers, still not a file
// with a block of zeros (the verification punches it), and keeps what
// they had.
func TestLandingSumsFinish(t *testing.T) {
	box := t.TempDir()
	r0 := filepath.Join(box, "stage/0")
	os.MkdirAll(filepath.Join(r0, "d"), 0o755)
	os.WriteFile(filepath.Join(r0, "a"), []byte("alpha"), 0o644)
	for i := 0; i < 50; i++ {
		os.WriteFile(filepath.Join(r0, "d", "f"+itoa(i)), []byte("file "+itoa(i)), 0o644)
	}
	os.WriteFile(filepath.Join(r0, "m"), append([]byte("x"), make([]byte, 8192)...), 0o644)
	os.WriteFile(filepath.Join(r0, "z"), []byte("last"), 0o644)
	l := hashAhead(t, box)
	if l.Sum("0/z", statOf(t, filepath.Join(r0, "z"))) != nil {
		t.Fatalf("0/z, the root's last name, hashed ahead")
	}
	stage, err := unix.Open(filepath.Join(box, "stage"), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(stage)
	l.Finish(stage, "0")
	for p, want := range map[string]string{"0/a": "alpha", "0/z": "last", "0/d/f0": "file 0", "0/d/f49": "file 49"} {
		h := NewSHA256()
		h.Write([]byte(want))
		if got := l.Sum(p, statOf(t, filepath.Join(box, "stage", p))); !bytes.Equal(got, h.Sum(nil)) {
			t.Errorf("%s: after Finish %x, want %x", p, got, h.Sum(nil))
		}
	}
	if l.Sum("0/m", statOf(t, filepath.Join(r0, "m"))) != nil {
		t.Errorf("0/m (a block of zeros) hashed by Finish")
	}
	if l.Files != 52 {
		t.Errorf("%d files hashed, want 52 (all but 0/m)", l.Files)
	}
	var none *LandingSums
	none.Finish(stage, "0") // no hashing ahead: nothing to do
}
