//go:build linux

package copy

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"deathwatch/shared"
	"deathwatch/supervisor"
)

// TestWriteArchive: the copy-in tar is the frame sender's tree: every
// kind with its mode, set-id bits dropped, a hard link as a link with
// its file's mode (the engine applies a link's mode to the inode), a
// symlink never followed, a sparse file's holes as zeros; and the
// copy-end it returns is the one a frame copy of the tree carries.
func TestWriteArchive(t *testing.T) {
	src := t.TempDir()
	tree := filepath.Join(src, "tree")
	write(t, filepath.Join(tree, "a"), "alpha")
	os.Chmod(filepath.Join(tree, "a"), 0o4755)
	write(t, filepath.Join(tree, "d/b"), "beta")
	os.Chmod(filepath.Join(tree, "d/b"), 0o600)
	os.Link(filepath.Join(tree, "d/b"), filepath.Join(tree, "hb"))
	os.Symlink("/etc/passwd", filepath.Join(tree, "out"))
	f, _ := os.Create(filepath.Join(tree, "sparse"))
	f.WriteAt([]byte("end"), 100000)
	f.Close()
	l := New(Options{In: []CopyIn{{Host: tree, Box: "/w"}, {Host: filepath.Join(tree, "a"), Box: "/f"}}})
	l.l = &supervisor.PartyLaunch{Box: &supervisor.Box{}, Say: func(string, ...any) {}}
	var buf bytes.Buffer
	ends, files, size, err := l.writeArchive(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got[h.Name] = string(h.Typeflag) + " " + strconv.FormatInt(h.Mode, 8) + " " + h.Linkname + " " + strings.TrimRight(string(data), "\x00")
		if h.Name == shared.CopyStageDir+"/0/sparse" && (len(data) != 100003 || string(data[100000:]) != "end") {
			t.Errorf("sparse: %d bytes", len(data))
		}
	}
	st := shared.CopyStageDir
	for name, want := range map[string]string{
		st + "/":         "5 700  ",
		st + "/0/":       "5 755  ",
		st + "/0/a":      "0 755  alpha",
		st + "/0/d/b":    "0 600  beta",
		st + "/0/hb":     "1 600 " + st + "/0/d/b ",
		st + "/0/out":    "2 777 /etc/passwd ",
		st + "/0/d/":     "5 755  ",
		st + "/0/sparse": "0 644  " + "\x00" + "end",
		st + "/1":        "0 755  alpha",
	} {
		if name == st+"/0/sparse" {
			if _, ok := got[name]; !ok {
				t.Errorf("%s missing", name)
			}
			continue
		}
		if got[name] != want {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	if len(got) != 9 {
		t.Errorf("%d entries: %v", len(got), got)
	}
	// The copy-ends are what the frame sender says of the same trees.
	for i, ci := range l.In {
		var want shared.CopyEnd
		s := &shared.CopySender{Frames: shared.CopyInFrames, Send: func(ft shared.FrameType, p []byte) error {
			if ft == shared.FrameCopyInEnd {
				want, _ = shared.ParseCopyEnd(p)
			}
			return nil
		}}
		dfd, name, _ := openHostRoot(ci)
		s.SendTree(uint32(i), dfd, name)
		if !bytes.Equal(ends[i].Manifest, want.Manifest) || ends[i].Files != want.Files || ends[i].Bytes != want.Bytes || ends[i].Root != uint32(i) {
			t.Errorf("root %d: copy-end %+v, the frame sender's %+v", i, ends[i], want)
		}
	}
	if files != 4 || size != 5+4+100003+5 {
		t.Errorf("%d files of %d bytes", files, size)
	}
}

// TestPipelined: what goes through the pipeline comes out whole and in
// order, whatever the pieces, read by WriteTo or by Read; a reader that
// stops (Stop) fails the writes still to come; a writer's error is the
// reader's.
func TestPipelined(t *testing.T) {
	for _, how := range []string{"WriteTo", "Read"} {
		p := newPipelined(1000, 3)
		var want []byte
		go func() {
			for i := 0; i < 500; i++ {
				piece := bytes.Repeat([]byte{byte(i)}, i*7%2500)
				if n, err := p.Write(piece); n != len(piece) || err != nil {
					panic(err)
				}
			}
			p.CloseWithError(nil)
		}()
		for i := 0; i < 500; i++ {
			want = append(want, bytes.Repeat([]byte{byte(i)}, i*7%2500)...)
		}
		var out bytes.Buffer
		var err error
		if how == "WriteTo" {
			_, err = p.WriteTo(&out)
		} else {
			_, err = io.Copy(&out, struct{ io.Reader }{p})
		}
		if err != nil || !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("%s: %v; %d bytes out, %d in", how, err, out.Len(), len(want))
		}
	}
	p := newPipelined(10, 2)
	p.Stop()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = p.Write(make([]byte, 25))
	}
	if err != errReaderGone {
		t.Fatalf("a write after the reader stopped: %v", err)
	}
	p = newPipelined(10, 2)
	go func() { p.Write(make([]byte, 5)); p.CloseWithError(io.ErrUnexpectedEOF) }()
	if _, err := p.WriteTo(io.Discard); err != io.ErrUnexpectedEOF {
		t.Fatalf("the writer's error: %v", err)
	}
}
