package supervisor

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// makeLiveFIFO makes a fresh 0700 folder and a 0600 FIFO of the
// supervisor's own, holding the nonce for the watcher; close is the
// watcher's EOF, remove leaves nothing.
func TestMakeLiveFIFO(t *testing.T) {
	root := t.TempDir()
	lf, err := makeLiveFIFO(root, "dw-box", "0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{lf.dir: os.ModeDir | 0o700, filepath.Join(lf.dir, LiveFIFOName): os.ModeNamedPipe | 0o600} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want || int(st.Sys().(*syscall.Stat_t).Uid) != os.Geteuid() {
			t.Errorf("%s: mode %v uid %d, want %v owned by %d", p, st.Mode(), st.Sys().(*syscall.Stat_t).Uid, want, os.Geteuid())
		}
	}
	r, err := os.OpenFile(filepath.Join(lf.dir, LiveFIFOName), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 64)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "0123456789abcdef" {
		t.Fatalf("read %q, %v; want the nonce", buf[:n], err)
	}
	if _, err := makeLiveFIFO(root, "dw-box", "x"); err == nil {
		t.Error("a second FIFO for the same box: want an error (the folder must be fresh)")
	}
	lf.close()
	if _, err := r.Read(buf); err != io.EOF {
		t.Errorf("read after close = %v, want EOF", err)
	}
	lf.remove()
	if _, err := os.Lstat(lf.dir); !os.IsNotExist(err) {
		t.Errorf("folder left after remove: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b", ".hidden"} {
		if _, err := makeLiveFIFO(root, bad, "x"); err == nil {
			t.Errorf("box name %q: want an error", bad)
		}
	}
	// A link planted where the root should be is not followed.
	link := filepath.Join(t.TempDir(), "root")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	if _, err := makeLiveFIFO(link, "dw-other", "x"); err == nil {
		t.Error("a root that is a symlink: want an error")
	}
}
