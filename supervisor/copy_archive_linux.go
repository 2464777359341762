package supervisor

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	"deathwatch/shared"
	"golang.org/x/sys/unix"
)

// ArchiveStager is implemented by runtimes that can put a tar stream
// into a created box's file system before it starts (the Engine API's
// archive endpoint). Copy-in then lands there (shared.CopyStageDir)
// and only its manifest digest crosses the control stream; a runtime
// without it, or one that cannot now (no API reached), copies in
// frames.
type ArchiveStager interface {
	CanPutArchive(ctx context.Context) bool
	// PutArchive extracts the tar stream r at dir (absolute) of b.
	PutArchive(ctx context.Context, b *Box, dir string, r io.Reader) error
}

// Transports of a copy, as the staged, exported and verified events
// name them.
const (
	TransportArchive = "archive"
	TransportFrames  = "frames"
)

// archived is a copy-in put into the box by the runtime: each root's
// copy-end, for copy-in-landed.
type archived struct {
	ends         []shared.CopyEnd
	files, bytes int64
	start        time.Time
}

// stageArchive puts the copy-in trees into the created box when its
// runtime can: one tar stream built from the host trees by the frame
// sender's own walk (the same rules: no symlink followed, set-id bits
// dropped, hard links as links), the manifest computed in the same
// pass. A host tree that cannot be read is a *shared.CopyRefusedError.
func (l *launch) stageArchive(ctx context.Context) error {
	a, ok := l.rt.(ArchiveStager)
	// A one-step runtime's box has started by now: frames carry it.
	if len(l.o.CopyIn) == 0 || !ok || l.oneStep || !a.CanPutArchive(ctx) {
		return nil
	}
	start := time.Now()
	pr, pw := io.Pipe()
	type built struct {
		ends         []shared.CopyEnd
		files, bytes int64
		err          error
	}
	done := make(chan built, 1)
	go func() {
		var b built
		b.ends, b.files, b.bytes, b.err = l.writeArchive(pw)
		pw.CloseWithError(b.err)
		done <- b
	}()
	err := a.PutArchive(ctx, l.box, "/", pr)
	pr.CloseWithError(errors.New("the engine stopped reading"))
	b := <-done
	var refused *shared.CopyRefusedError
	if errors.As(b.err, &refused) {
		return b.err
	}
	if err != nil {
		return err
	}
	if b.err != nil {
		return b.err
	}
	l.archive = &archived{ends: b.ends, files: b.files, bytes: b.bytes, start: start}
	l.x.Log.Info("copy-in archive put", "box", l.box.Name, "files", b.files, "bytes", b.bytes, "seconds", time.Since(start).Seconds())
	return nil
}

// writeArchive writes the copy-in trees as one tar stream, root i as
// shared.CopyStageDir/i, and returns each root's copy-end.
func (l *launch) writeArchive(w io.Writer) ([]shared.CopyEnd, int64, int64, error) {
	tw := tar.NewWriter(w)
	now := time.Now().Truncate(time.Second)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: shared.CopyStageDir + "/", Mode: 0o700, ModTime: now, Format: tar.FormatPAX}); err != nil {
		return nil, 0, 0, err
	}
	k := &tarSink{tw: tw, now: now}
	s := &shared.CopySender{Frames: shared.CopyInFrames, Send: k.send,
		Skipped: func(p string, mode uint32) {
			l.say("copy-in: %s: not a folder, file or symlink (mode %o); not sent", p, mode)
		}}
	var ends []shared.CopyEnd
	for i, ci := range l.o.CopyIn {
		dfd, name, err := openHostRoot(ci)
		if err != nil {
			return nil, 0, 0, &shared.CopyRefusedError{Reason: ci.Host + ": " + err.Error()}
		}
		k.prefix = shared.CopyStageDir + "/" + strconv.Itoa(i)
		err = s.SendTree(uint32(i), dfd, name)
		unix.Close(dfd)
		if err != nil {
			return nil, 0, 0, err
		}
		ends = append(ends, k.endRec)
	}
	return ends, s.Files, s.Bytes, tw.Close()
}

// tarSink turns one direction's copy frames into tar entries: the
// tree's walk is the frame sender's. A file's holes are written as
// zeros (archive/tar writes no sparse entries, and the engine's
// extraction would fill them anyway): a sparse file lands whole.
type tarSink struct {
	tw     *tar.Writer
	now    time.Time
	prefix string
	off    int64
	size   int64
	endRec shared.CopyEnd
	zeros  []byte
	// modes are the files' modes by tar name: a hard link's header
	// carries its file's (the engine applies a link's mode to the inode).
	modes map[string]int64
}

func (k *tarSink) name(p string) string {
	if p == "" {
		return k.prefix
	}
	return k.prefix + "/" + p
}

func (k *tarSink) pad(to int64) error {
	if k.zeros == nil {
		k.zeros = make([]byte, 64<<10)
	}
	for k.off < to {
		n, err := k.tw.Write(k.zeros[:min(int64(len(k.zeros)), to-k.off)])
		k.off += int64(n)
		if err != nil {
			return err
		}
	}
	return nil
}

func (k *tarSink) send(t shared.FrameType, p []byte) error {
	switch t {
	case shared.FrameCopyInEntry:
		e, err := shared.ParseCopyEntry(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: k.name(e.Path), Mode: int64(e.Mode), ModTime: k.now, Format: tar.FormatPAX}
		switch e.Kind {
		case shared.CopyDir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case shared.CopyFile:
			h.Typeflag, h.Size = tar.TypeReg, e.Size
			k.off, k.size = 0, e.Size
			if k.modes == nil {
				k.modes = map[string]int64{}
			}
			k.modes[h.Name] = h.Mode
		case shared.CopySymlink:
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.Link, 0o777
		case shared.CopyHardlink:
			h.Typeflag, h.Linkname = tar.TypeLink, k.name(e.Link)
			h.Mode = k.modes[h.Linkname]
		}
		return k.tw.WriteHeader(h)
	case shared.FrameCopyInData:
		d, err := shared.ParseCopyData(p)
		if err != nil {
			return err
		}
		if err := k.pad(d.Offset); err != nil {
			return err
		}
		n, err := k.tw.Write(d.Bytes)
		k.off += int64(n)
		return err
	case shared.FrameCopyInSum:
		return k.pad(k.size)
	case shared.FrameCopyInEnd:
		e, err := shared.ParseCopyEnd(p)
		if err != nil {
			return err
		}
		k.endRec = e
	}
	return nil
}
