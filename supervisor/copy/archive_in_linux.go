package copy

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"golang.org/x/sys/unix"
)

// ArchiveStager is implemented by runtimes that can put a tar stream
// into a box's file system (the Engine API's archive endpoint): the
// box runs, its watcher waiting for copy-in before the agent. Copy-in then lands there (shared.CopyStageDir)
// and only its manifest digest crosses the control stream; a runtime
// without it, or one that cannot now (no API reached), copies in
// frames.
type ArchiveStager interface {
	CanPutArchive(ctx context.Context) bool
	// PutArchive extracts the tar stream r at dir (absolute) of b.
	PutArchive(ctx context.Context, b *supervisor.Box, dir string, r io.Reader) error
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

// canStageArchive reports whether the launch's copy-in goes by the
// runtime's archive. (A one-step runtime's client starts the box
// itself, and an engine extracts an archive only into a writable root,
// which has no tmpfs /tmp: frames carry it otherwise.)
func (c *Copies) canStageArchive(ctx context.Context) bool {
	a, ok := c.l.Runtime.(ArchiveStager)
	return len(c.Options.In) > 0 && ok && !c.l.OneStep && c.l.Box.ReadWriteRoot && a.CanPutArchive(ctx)
}

// stageArchive puts the copy-in trees into the box: one tar stream
// built from the host trees by the frame sender's own walk (the same
// rules: no symlink followed, set-id bits dropped, hard links as
// links), the manifest computed in the same pass. The box runs by
// then, its watcher waiting for copy-in-landed before the agent: it
// hashes the files ahead as they land (shared.LandingSums), so its
// verification overlaps the put instead of following it. (Docker's
// start waits for a put under way: the box is started first.) A host
// tree that cannot be read is a *shared.CopyRefusedError.
func (c *Copies) stageArchive(ctx context.Context) error {
	a := c.l.Runtime.(ArchiveStager)
	start := time.Now()
	type built struct {
		ends         []shared.CopyEnd
		files, bytes int64
		err          error
	}
	done := make(chan built, 1)
	// The walk reads and hashes; the HTTP client's goroutine writes the
	// pipeline's 1 MiB buffers (its WriteTo: each a chunk, not 32 KiB
	// reads) to the engine's socket: on two cores the hashing and the
	// socket writes overlap.
	pl := newPipelined(1<<20, 4)
	go func() {
		var b built
		b.ends, b.files, b.bytes, b.err = c.writeArchive(pl)
		pl.CloseWithError(b.err)
		done <- b
	}()
	err := a.PutArchive(ctx, c.l.Box, "/", pl)
	pl.Stop()
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
	c.archive = &archived{ends: b.ends, files: b.files, bytes: b.bytes, start: start}
	c.l.Log.Info("copy-in archive put", "box", c.l.Box.Name, "files", b.files, "bytes", b.bytes, "seconds", time.Since(start).Seconds())
	return nil
}

// writeArchive writes the copy-in trees as one tar stream, root i as
// shared.CopyStageDir/i, and returns each root's copy-end.
func (c *Copies) writeArchive(w io.Writer) ([]shared.CopyEnd, int64, int64, error) {
	tw := tar.NewWriter(w)
	now := time.Now().Truncate(time.Second)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: shared.CopyStageDir + "/", Mode: 0o700, ModTime: now, Format: tar.FormatPAX}); err != nil {
		return nil, 0, 0, err
	}
	k := &tarSink{tw: tw, now: now, uid: int(c.l.Box.AgentUID), gid: int(c.l.Box.AgentGID)}
	s := &shared.CopySender{Frames: shared.CopyInFrames, Send: k.send, Data: k.data,
		Skipped: func(p string, mode uint32) {
			c.l.Say("copy-in: %s: not a folder, file or symlink (mode %o); not sent", p, mode)
		}}
	var ends []shared.CopyEnd
	for i, ci := range c.Options.In {
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
	tw  *tar.Writer
	now time.Time
	// uid and gid own every entry: the agent's, which the engine's
	// extraction applies (as root), so that the watcher's verification
	// finds them and has nothing to change (it changes what differs).
	uid, gid int
	prefix   string
	off      int64
	size     int64
	endRec   shared.CopyEnd
	zeros    []byte
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
		h := &tar.Header{Name: k.name(e.Path), Mode: int64(e.Mode), Uid: k.uid, Gid: k.gid, ModTime: k.now, Format: tar.FormatPAX}
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

// data writes a piece of the current file (its holes before it as zeros).
func (k *tarSink) data(d shared.CopyData) error {
	if err := k.pad(d.Offset); err != nil {
		return err
	}
	n, err := k.tw.Write(d.Bytes)
	k.off += int64(n)
	return err
}

// pipelined is a writer whose writes are gathered into buffers of size
// bytes, n at most in flight, and the reader of the same: its writer
// goes on (reading, hashing) while the reader's goroutine writes them
// on. As the put's HTTP body its WriteTo writes each buffer to the
// connection as it is, no copy of it (an io.Pipe would copy each into
// the reader's buffer).
type pipelined struct {
	buf   []byte
	full  chan []byte
	free  chan []byte
	stop  chan struct{} // closed: the reader is gone
	once  sync.Once
	err   error  // why the writer ended (nil: io.EOF), set before full is closed
	cur   []byte // Read: what is left of the buffer being read
	whole []byte
}

// errReaderGone is a write after the reader stopped.
var errReaderGone = errors.New("the engine stopped reading")

func newPipelined(size, n int) *pipelined {
	p := &pipelined{full: make(chan []byte, n), free: make(chan []byte, n), stop: make(chan struct{})}
	for i := 1; i < n; i++ {
		p.free <- make([]byte, 0, size)
	}
	p.buf = make([]byte, 0, size)
	return p
}

func (p *pipelined) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		k := copy(p.buf[len(p.buf):cap(p.buf)], b)
		p.buf, b = p.buf[:len(p.buf)+k], b[k:]
		if len(p.buf) < cap(p.buf) {
			break
		}
		if err := p.handOn(); err != nil {
			return n - len(b), err
		}
	}
	return n, nil
}

// ReadFrom reads r into the buffers themselves (no copy of the bytes)
// until r ends (nil) or fails, or the reader is gone (errReaderGone).
func (p *pipelined) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for {
		k, err := r.Read(p.buf[len(p.buf):cap(p.buf)])
		p.buf = p.buf[:len(p.buf)+k]
		n += int64(k)
		if len(p.buf) == cap(p.buf) {
			if herr := p.handOn(); herr != nil {
				return n, herr
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// handOn passes the full buffer to the reader and takes the next one.
func (p *pipelined) handOn() error {
	select {
	case p.full <- p.buf:
	case <-p.stop:
		return errReaderGone
	}
	select {
	case p.buf = <-p.free:
		return nil
	case <-p.stop:
		return errReaderGone
	}
}

// CloseWithError ends the stream: with err nil what is gathered goes
// first and the reader then sees io.EOF; else it sees err.
func (p *pipelined) CloseWithError(err error) {
	if err == nil && len(p.buf) > 0 {
		select {
		case p.full <- p.buf:
		case <-p.stop:
		}
	}
	p.err = err
	close(p.full)
}

// Stop says the reader is gone: a writer waiting for it goes on (with
// errReaderGone).
func (p *pipelined) Stop() { p.once.Do(func() { close(p.stop) }) }

func (p *pipelined) end() error {
	if p.err != nil {
		return p.err
	}
	return io.EOF
}

// WriteTo writes the buffers to w as they come, until the writer ends.
func (p *pipelined) WriteTo(w io.Writer) (int64, error) {
	var n int64
	if len(p.cur) > 0 {
		k, err := w.Write(p.cur)
		n += int64(k)
		p.free <- p.whole[:0]
		p.cur, p.whole = nil, nil
		if err != nil {
			return n, err
		}
	}
	for b := range p.full {
		k, err := w.Write(b)
		n += int64(k)
		p.free <- b[:0]
		if err != nil {
			return n, err
		}
	}
	if err := p.end(); err != io.EOF {
		return n, err
	}
	return n, nil
}

func (p *pipelined) Read(b []byte) (int, error) {
	if len(p.cur) == 0 {
		next, ok := <-p.full
		if !ok {
			return 0, p.end()
		}
		p.whole, p.cur = next, next
	}
	k := copy(b, p.cur)
	p.cur = p.cur[k:]
	if len(p.cur) == 0 {
		p.free <- p.whole[:0]
		p.cur, p.whole = nil, nil
	}
	return k, nil
}
