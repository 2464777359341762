package shared

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// pipeTree sends src's tree through a CopySender straight into a
// CopyReceiver beneath dst, as base.
func pipeTree(t *testing.T, s *CopySender, r *CopyReceiver, src, name string) error {
	t.Helper()
	dfd, err := unix.Open(src, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	var rerr error
	s.Frames = CopyInFrames
	s.Send = func(ft FrameType, p []byte) error {
		if rerr == nil {
			_, _, rerr = r.Frame(CopyInFrames, Frame{Type: ft, Payload: append([]byte(nil), p...)})
		}
		return nil
	}
	if err := s.SendTree(0, dfd, name); err != nil {
		return err
	}
	return rerr
}

func TestCopyTreeLocal(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(src, "t/d"), 0o755)
	os.WriteFile(filepath.Join(src, "t/keep"), []byte("keep"), 0o644)
	os.WriteFile(filepath.Join(src, "t/d/private"), []byte("private"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(src, "t/abs"))
	os.Symlink("../keep", filepath.Join(src, "t/d/in"))
	root, _ := unix.Open(dst, unix.O_PATH|unix.O_DIRECTORY, 0)
	defer unix.Close(root)
	var skipped []string
	s := &CopySender{Allow: func(uid, mode uint32) bool { return mode&0o004 != 0 }, Skipped: func(p string, _ uint32) { skipped = append(skipped, p) }}
	r := &CopyReceiver{Root: root, Bases: []string{"out"}, Symlink: SymlinkStaysInside}
	if err := pipeTree(t, s, r, src, "t"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "out/keep")); string(b) != "keep" {
		t.Errorf("keep = %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dst, "out/d/private")); err == nil || len(skipped) != 1 || skipped[0] != "d/private" {
		t.Errorf("a file Allow refused was sent (%v), skipped %v", err, skipped)
	}
	if _, err := os.Lstat(filepath.Join(dst, "out/abs")); err == nil || len(r.Refused) != 1 {
		t.Errorf("a symlink out of the tree was made (%v), refused %v", err, r.Refused)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "out/d/in")); l != "../keep" {
		t.Errorf("d/in -> %q", l)
	}
	// Over the limit: refused whole.
	r2 := &CopyReceiver{Root: root, Bases: []string{"out2"}, Limit: 3}
	err := pipeTree(t, &CopySender{}, r2, src, "t")
	if _, ok := err.(*CopyRefusedError); !ok {
		t.Errorf("over the limit: %v, want a refusal", err)
	}
	// A base whose parent is a symlink is refused: nothing written through it.
	os.Symlink(src, filepath.Join(dst, "link"))
	r3 := &CopyReceiver{Root: root, Bases: []string{"link/x"}}
	if err := pipeTree(t, &CopySender{}, r3, src, "t"); err == nil {
		t.Errorf("a write through a symlinked parent was not refused")
	}
	if _, err := os.Lstat(filepath.Join(src, "x")); err == nil {
		t.Errorf("written through the symlink")
	}
}
