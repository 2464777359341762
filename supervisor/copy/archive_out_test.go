//go:build linux

package copy

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
)

// archiveRuntime is copyRuntime with the Engine API's GET archive: it
// writes the box's tree as dockerd does (depth first, each folder's
// names sorted, a second name of an inode as a hard link, everything
// read as root), with a way to tamper with it on the way.
type archiveRuntime struct {
	*copyRuntime
	// tamper may change an entry's bytes (or drop it: nil).
	tamper func(h *tar.Header, data []byte) []byte
	// extra entries appended to the stream, as a hostile engine might.
	extra []*tar.Header
	gets  int
}

var theArchiveRT = &archiveRuntime{copyRuntime: &copyRuntime{memRuntime: &memRuntime{boxes: map[string]supervisor.Listed{}}}}

func init() {
	supervisor.Register(supervisor.Descriptor{Name: "copyrt-archive", Bounds: supervisor.Bounds{Dead: time.Second, Removed: time.Second},
		New: func(supervisor.RuntimeConfig) (supervisor.Runtime, error) { return theArchiveRT, nil }})
}

func (a *archiveRuntime) Name() string                       { return "copyrt-archive" }
func (a *archiveRuntime) CanGetArchive(context.Context) bool { return true }

func (a *archiveRuntime) GetArchive(_ context.Context, _ *supervisor.Box, p string) (io.ReadCloser, error) {
	a.gets++
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	top := filepath.Join(a.boxRoot, p)
	seen := map[uint64]string{}
	err := filepath.WalkDir(top, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(q)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(top, q)
		name := path.Join(path.Base(p), filepath.ToSlash(rel))
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(q)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = name
		if fi.IsDir() {
			h.Name += "/"
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().IsRegular() && st.Nlink > 1 {
			if first, ok := seen[st.Ino]; ok {
				h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			} else {
				seen[st.Ino] = name
			}
		}
		var data []byte
		if h.Typeflag == tar.TypeReg {
			if data, err = os.ReadFile(q); err != nil {
				return err
			}
		}
		if a.tamper != nil {
			if data = a.tamper(h, data); h.Typeflag == tar.TypeReg && data == nil {
				return nil
			}
			h.Size = int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	for _, h := range a.extra {
		tw.WriteHeader(h)
		tw.Write(make([]byte, h.Size))
	}
	tw.Close()
	return io.NopCloser(&buf), err
}

// archiveBox is a tree with what the archive carries and what it must
// not bring: a file the agent may not read (root's, 0600: the engine
// reads it, the watcher's manifest leaves it out), a FIFO, a symlink
// to a host path; and a sparse file, hard links, a read-only folder.
func archiveBox(t *testing.T) string {
	box := t.TempDir()
	write(t, filepath.Join(box, "res/a"), "alpha")
	write(t, filepath.Join(box, "res/sub/b"), strings.Repeat("b", 300000))
	os.Link(filepath.Join(box, "res/a"), filepath.Join(box, "res/sub/hard"))
	write(t, filepath.Join(box, "res/secret"), "root only")
	os.Chmod(filepath.Join(box, "res/secret"), 0o600)
	syscall.Mkfifo(filepath.Join(box, "res/fifo"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(box, "res/evil"))
	f, _ := os.Create(filepath.Join(box, "res/sparse"))
	f.WriteAt([]byte("end"), 8<<20)
	f.Close()
	write(t, filepath.Join(box, "res/ro/c"), "c")
	os.Chmod(filepath.Join(box, "res/ro"), 0o555)
	return box
}

// TestCopyOutArchive: the tree comes by the archive, byte for byte,
// made from the watcher's manifest: what the manifest leaves out (root's
// file, the FIFO, an entry the engine added) is dropped and counted, an
// escaping symlink is not made, a sparse file comes back sparse.
func TestCopyOutArchive(t *testing.T) {
	box, out := archiveBox(t), t.TempDir()
	theArchiveRT.boxRoot, theArchiveRT.tamper, theArchiveRT.gets = box, nil, 0
	theArchiveRT.extra = []*tar.Header{{Name: "res/planted", Typeflag: tar.TypeReg, Size: 10, Mode: 0o644}, {Name: "../escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}}
	defer func() { theArchiveRT.extra = nil }()
	run := runCopy(t, supervisor.ExecOptions{Runtime: "copyrt-archive", ReadWriteRoot: true}, Options{Out: []CopyOut{{Box: "/res", HostDir: out}}})
	if run.code != 0 || theArchiveRT.gets != 1 {
		t.Fatalf("exit %d, %d GETs: %s", run.code, theArchiveRT.gets, run.stderr)
	}
	for p, want := range map[string]string{"res/a": "alpha", "res/sub/b": strings.Repeat("b", 300000), "res/ro/c": "c"} {
		if b, _ := os.ReadFile(filepath.Join(out, p)); string(b) != want {
			t.Errorf("%s: %d bytes %.10q", p, len(b), b)
		}
	}
	for _, p := range []string{"res/secret", "res/fifo", "res/evil", "res/planted", "escape", "../escape"} {
		if _, err := os.Lstat(filepath.Join(out, p)); err == nil {
			t.Errorf("%s came out", p)
		}
	}
	var a, h syscall.Stat_t
	syscall.Stat(filepath.Join(out, "res/a"), &a)
	syscall.Stat(filepath.Join(out, "res/sub/hard"), &h)
	if a.Ino != h.Ino || a.Ino == 0 {
		t.Errorf("res/sub/hard is not a hard link of res/a")
	}
	var sp syscall.Stat_t
	if err := syscall.Stat(filepath.Join(out, "res/sparse"), &sp); err != nil || sp.Size != 8<<20+3 || sp.Blocks*512 > 1<<20 {
		t.Errorf("res/sparse: %d bytes, %d allocated (%v)", sp.Size, sp.Blocks*512, err)
	}
	if fi, _ := os.Stat(filepath.Join(out, "res/ro")); fi == nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("res/ro: %v", fi)
	}
	var verified *supervisor.Event
	for i, ev := range run.events {
		if (ev.Event == supervisor.EventExported || ev.Event == supervisor.EventVerified) && ev.Transport != TransportArchive {
			t.Errorf("%s by %q", ev.Event, ev.Transport)
		}
		if ev.Event == supervisor.EventVerified {
			verified = &run.events[i]
		}
	}
	// secret, fifo, planted, ../escape.
	if verified == nil || verified.Dropped != 4 || verified.Refused != 1 || !strings.Contains(run.stderr, "4 entries of the archive") {
		t.Errorf("verified %+v; stderr %s", verified, run.stderr)
	}
}

// What the engine sends that is not what the watcher hashed fails the
// launch: 248 verify-failed, nothing kept, and the watcher is let go.
func TestCopyOutArchiveTampered(t *testing.T) {
	for name, tamper := range map[string]func(h *tar.Header, data []byte) []byte{
		"a byte changed": func(h *tar.Header, data []byte) []byte {
			if strings.HasSuffix(h.Name, "sub/b") {
				data[len(data)-1] ^= 1
			}
			return data
		},
		"a file missing": func(h *tar.Header, data []byte) []byte {
			if strings.HasSuffix(h.Name, "sub/b") {
				return nil
			}
			return data
		},
		"a file longer": func(h *tar.Header, data []byte) []byte {
			if strings.HasSuffix(h.Name, "res/a") {
				return append(data, 'x')
			}
			return data
		},
	} {
		t.Run(name, func(t *testing.T) {
			box, out := archiveBox(t), t.TempDir()
			theArchiveRT.boxRoot, theArchiveRT.tamper = box, tamper
			defer func() { theArchiveRT.tamper = nil }()
			run := runCopy(t, supervisor.ExecOptions{Runtime: "copyrt-archive", ReadWriteRoot: true}, Options{Out: []CopyOut{{Box: "/res", HostDir: out}}})
			last := run.events[len(run.events)-2]
			if run.code != shared.ExitCopyFailed || last.Reason != string(shared.ReasonVerifyFailed) || !strings.Contains(run.stderr, "verify-failed") {
				t.Fatalf("exit %d, exited %+v, stderr %s", run.code, last, run.stderr)
			}
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Errorf("kept after a failed verification: %v", ents)
			}
			t.Logf("stderr: %s", strings.TrimSpace(run.stderr))
		})
	}
}

// The bounds hold by archive as by frames: a tree over the limit is
// refused whole (the fetch it began is stopped) and nothing is kept.
func TestCopyOutArchiveLimit(t *testing.T) {
	box, out := archiveBox(t), t.TempDir()
	theArchiveRT.boxRoot, theArchiveRT.tamper, theArchiveRT.gets = box, nil, 0
	run := runCopy(t, supervisor.ExecOptions{Runtime: "copyrt-archive", ReadWriteRoot: true}, Options{Out: []CopyOut{{Box: "/res", HostDir: out}}, OutLimit: 4096, OutMaxEntries: 100})
	if run.code != shared.ExitCopyFailed || !strings.Contains(run.stderr, "limit") {
		t.Fatalf("exit %d, %d GETs: %s", run.code, theArchiveRT.gets, run.stderr)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("kept: %v", ents)
	}
}

// TestReadAhead: what is read ahead comes out whole and in order, then
// the stream's end; Close in the middle lets go of the goroutine.
func TestReadAhead(t *testing.T) {
	want := make([]byte, 100_003)
	for i := range want {
		want[i] = byte(i * 7)
	}
	ra := newReadAhead(io.NopCloser(bytes.NewReader(want)), 1000, 3)
	got, err := io.ReadAll(io.LimitReader(ra, 1<<20))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%d bytes of %d, %v", len(got), len(want), err)
	}
	ra.Close()
	pr, pw := io.Pipe()
	go pw.Write(make([]byte, 5000))
	ra = newReadAhead(pr, 1000, 2)
	ra.Read(make([]byte, 10))
	ra.Close() // the writer still has bytes to give: Close must not hang
}
