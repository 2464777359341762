package shared

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

// An entry limit refuses a tree whole, at the sender (the watcher) and
// at the receiver (the host, against a sender that does not keep it).
func TestCopyEntryLimit(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	for i := 0; i < 10; i++ {
		os.MkdirAll(filepath.Join(src, "t", itoa(i)), 0o755)
	}
	root, _ := unix.Open(dst, unix.O_PATH|unix.O_DIRECTORY, 0)
	defer unix.Close(root)
	for _, c := range []struct {
		name     string
		send, rc int64
	}{{"sender", 5, 0}, {"receiver", 0, 5}} {
		r := &CopyReceiver{Root: root, Bases: []string{c.name}, MaxEntries: c.rc}
		err := pipeTree(t, &CopySender{MaxEntries: c.send}, r, src, "t")
		if _, ok := err.(*CopyRefusedError); c.send > 0 && !ok {
			t.Errorf("%s: %v, want a refusal", c.name, err)
		}
		if e, ok := err.(*CopyRefusedError); c.rc > 0 && (!ok || !strings.Contains(e.Reason, "5 entries")) {
			t.Errorf("%s: %v, want a refusal naming the limit", c.name, err)
		}
	}
	// 11 entries (the root and ten folders) pass a limit of 11.
	r := &CopyReceiver{Root: root, Bases: []string{"exact"}, MaxEntries: 11}
	if err := pipeTree(t, &CopySender{MaxEntries: 11}, r, src, "t"); err != nil {
		t.Errorf("a tree at the limit: %v", err)
	}
}

// TestReceiverMemoryPerEntry measures what a receiver keeps per entry
// of a tree in progress: the figure behind the supervisor's default
// entry limit.
func TestReceiverMemoryPerEntry(t *testing.T) {
	dst := t.TempDir()
	root, _ := unix.Open(dst, unix.O_PATH|unix.O_DIRECTORY, 0)
	defer unix.Close(root)
	r := &CopyReceiver{Root: root, Bases: []string{"m"}}
	const n = 20000
	name := func(i int) string { return "d/" + strings.Repeat("x", 30) + itoa(100000+i) } // 40-byte paths
	frame := func(ft FrameType, p []byte) {
		if _, _, err := r.Frame(CopyInFrames, Frame{Type: ft, Payload: p}); err != nil {
			t.Fatal(err)
		}
	}
	frame(FrameCopyInEntry, CopyEntry{Kind: CopyDir, Mode: 0o755}.Marshal())
	frame(FrameCopyInEntry, CopyEntry{Path: "d", Kind: CopyDir, Mode: 0o755}.Marshal())
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		frame(FrameCopyInEntry, CopyEntry{Path: name(i), Kind: CopySymlink, Link: "t"}.Marshal())
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("receiver heap per entry (40-byte path): %.0f bytes; %d entries: %s", per, 1_000_000, FormatSize(int64(per*1_000_000)))
	if per > 1024 {
		t.Errorf("%.0f bytes per entry: more than 1 KiB", per)
	}
	r.Close()
}
