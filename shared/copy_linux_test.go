package shared

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

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

// sentEnd is the copy-end the frame sender sends for src/name as root 0
// (what the host's copy-in-landed carries).
func sentEnd(t *testing.T, src, name string) CopyEnd {
	t.Helper()
	var want CopyEnd
	sfd, err := unix.Open(src, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sfd)
	s := &CopySender{Frames: CopyInFrames, Send: func(ft FrameType, p []byte) error {
		if ft == FrameCopyInEnd {
			want, _ = ParseCopyEnd(p)
		}
		return nil
	}}
	if err := s.SendTree(0, sfd, name); err != nil {
		t.Fatal(err)
	}
	return want
}

// TestLanded: a tree the host put into the box is checked against the
// copy-end it sent, then moved to its base; anything changed, added,
// removed or never sendable fails it as a *VerifyError. Each case also
// with the files hashed ahead as they landed, the change made after.
func TestLanded(t *testing.T) {
	mk := func(t *testing.T, root string) {
		os.MkdirAll(filepath.Join(root, "d"), 0o755)
		os.WriteFile(filepath.Join(root, "a"), []byte("alpha"), 0o644)
		os.WriteFile(filepath.Join(root, "d/b"), []byte("beta"), 0o600)
		os.Symlink("../a", filepath.Join(root, "d/l"))
		// A file that is all zeros past its first block: holes again.
		f, _ := os.Create(filepath.Join(root, "zeros"))
		f.Write([]byte("x"))
		f.Write(make([]byte, 1<<20-1)) // dense, as tar lands it
		f.Close()
	}
	src := t.TempDir()
	mk(t, filepath.Join(src, "t"))
	want := sentEnd(t, src, "t")
	for _, c := range []struct {
		name   string
		tamper func(root string)
		ok     bool
	}{
		{"as sent", func(string) {}, true},
		{"set-id bits", func(root string) {
			unix.Chmod(filepath.Join(root, "d"), 0o2755)
			unix.Chmod(filepath.Join(root, "a"), 0o4644)
		}, true},
		{"changed", func(root string) { os.WriteFile(filepath.Join(root, "a"), []byte("alphA"), 0o644) }, false},
		{"replaced", func(root string) {
			os.Remove(filepath.Join(root, "d/b"))
			os.WriteFile(filepath.Join(root, "d/b"), []byte("bet4"), 0o600)
		}, false},
		{"extra", func(root string) { os.WriteFile(filepath.Join(root, "d/x"), nil, 0o644) }, false},
		{"missing", func(root string) { os.Remove(filepath.Join(root, "d/b")) }, false},
		{"mode", func(root string) { os.Chmod(filepath.Join(root, "d/b"), 0o644) }, false},
		{"fifo", func(root string) { unix.Mkfifo(filepath.Join(root, "d/fifo"), 0o644) }, false},
		{"symlink for a folder", func(root string) {
			os.RemoveAll(filepath.Join(root, "d"))
			os.Symlink("/etc", filepath.Join(root, "d"))
		}, false},
	} {
		for _, ahead := range []bool{false, true} {
			name := c.name
			if ahead {
				name += " after hashing ahead"
			}
			t.Run(name, func(t *testing.T) {
				box := t.TempDir()
				mk(t, filepath.Join(box, "stage/0"))
				var l *LandingSums
				if ahead {
					l = hashAhead(t, box)
					time.Sleep(20 * time.Millisecond) // a clock tick later
				}
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
				if !c.ok {
					return
				}
				if ahead && c.name == "as sent" && l.Used != 2 {
					t.Errorf("the verification used %d digests hashed ahead, want 2 (a, d/b)", l.Used)
				}
				for _, p := range []string{"work/t/d", "work/t/a"} {
					if fi, err := os.Stat(filepath.Join(box, p)); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
						t.Errorf("%s: %v (%v): set-id bits kept", p, fi.Mode(), err)
					}
				}
				if b, _ := os.ReadFile(filepath.Join(box, "work/t/d/b")); string(b) != "beta" {
					t.Errorf("work/t/d/b = %q", b)
				}
				if _, err := os.Lstat(filepath.Join(box, "stage/0")); err == nil {
					t.Errorf("the landed tree was not moved")
				}
				var st unix.Stat_t
				unix.Stat(filepath.Join(box, "work/t/zeros"), &st)
				t.Logf("zeros: %d bytes allocated of %d", st.Blocks*512, st.Size)
				if st.Blocks*512 > 64<<10 {
					t.Errorf("zero blocks not punched: %d bytes allocated", st.Blocks*512)
				}
				if r.Files != want.Files || r.Bytes != want.Bytes {
					t.Errorf("counted %d files %d bytes, want %d %d", r.Files, r.Bytes, want.Files, want.Bytes)
				}
			})
		}
	}
}

// TestLandedOwners: the verification gives every landed object to the
// agent's uid:gid, whether the engine applied the archive's owners
// (nothing to change) or left some as root, and drops set-id bits
// either way.
func TestLandedOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown)")
	}
	const uid, gid = 4321, 4322
	mk := func(root string) {
		os.MkdirAll(filepath.Join(root, "d"), 0o755)
		os.WriteFile(filepath.Join(root, "a"), []byte("alpha"), 0o644)
		os.WriteFile(filepath.Join(root, "d/b"), []byte("beta"), 0o600)
		os.Symlink("../a", filepath.Join(root, "d/l"))
	}
	src := t.TempDir()
	mk(filepath.Join(src, "t"))
	want := sentEnd(t, src, "t")
	box := t.TempDir()
	r0 := filepath.Join(box, "stage/0")
	mk(r0)
	// As the engine lands an archive that names the agent: all but a,
	// left as root, and d with a set-gid bit.
	for _, p := range []string{"", "d", "d/b", "d/l"} {
		os.Lchown(filepath.Join(r0, p), uid, gid)
	}
	unix.Chmod(filepath.Join(r0, "d"), 0o2755)
	root, _ := unix.Open(box, unix.O_PATH|unix.O_DIRECTORY, 0)
	defer unix.Close(root)
	stage, _ := unix.Open(filepath.Join(box, "stage"), unix.O_PATH|unix.O_DIRECTORY, 0)
	defer unix.Close(stage)
	r := &CopyReceiver{Root: root, Bases: []string{"work/t"}, Chown: true, UID: uid, GID: gid}
	if err := r.Landed(0, stage, "0", want); err != nil {
		t.Fatalf("Landed: %v", err)
	}
	for _, p := range []string{"", "a", "d", "d/b", "d/l"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(box, "work/t", p), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != uid || st.Gid != gid {
			t.Errorf("work/t/%s: owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
		}
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			t.Errorf("work/t/%s: mode %o: set-id bits kept", p, st.Mode)
		}
	}
}

// ClearMode: what lands (and the manifest written) has those bits
// cleared; the tree is still verified against what was sent.
func TestCopyClearMode(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(src, "t/d"), 0o777)
	os.WriteFile(filepath.Join(src, "t/d/f"), []byte("f"), 0o777)
	os.Chmod(filepath.Join(src, "t"), 0o777)
	os.Chmod(filepath.Join(src, "t/d"), 0o777)
	os.Chmod(filepath.Join(src, "t/d/f"), 0o777)
	root, _ := unix.Open(dst, unix.O_PATH|unix.O_DIRECTORY, 0)
	defer unix.Close(root)
	r := &CopyReceiver{Root: root, Bases: []string{"out"}, ClearMode: 0o022}
	if err := pipeTree(t, &CopySender{}, r, src, "t"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"out", "out/d", "out/d/f"} {
		if fi, err := os.Lstat(filepath.Join(dst, p)); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s landed %v (%v), want mode 0755", p, fi.Mode(), err)
		}
	}
	if m := string(r.Manifest()); strings.Contains(m, " 777 ") || !strings.Contains(m, " 755 ") {
		t.Errorf("the manifest written does not say what landed:\n%s", m)
	}
}
