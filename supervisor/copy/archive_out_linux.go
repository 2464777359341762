package copy

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/internal/crashpoint"
)

// Copy-out through the runtime's archive (shared/copy.go): once every
// process of the box is dead the watcher sends each tree's manifest
// (entries, copy-sums, copy-end; no data) and waits; the host reads the
// tree from the engine as a tar stream and replays the manifest into the
// frame receiver, each file's bytes taken from the archive. So the host
// writer's rules are the frame copy's own, a file whose bytes do not
// hash to the manifest's SHA-256 fails the copy as verify-failed with
// nothing kept, and folders, symlinks and hard links come from the
// manifest, never the archive: the engine reads the box as root, and the
// manifest, written by the watcher after the agent died, decides. An
// archive entry the manifest does not name (another user's file, a FIFO)
// is dropped and counted. Then copy-out-fetched lets the watcher send
// its exit record and go (the engine removes the box after).

// ArchiveExporter is implemented by runtimes that can read a box's
// file or tree as a tar stream (the Engine API's GET archive).
type ArchiveExporter interface {
	CanGetArchive(ctx context.Context) bool
	// GetArchive reads the file or tree at p (absolute) of b: the tar
	// stream names it path.Base(p), and what is below it beneath that.
	GetArchive(ctx context.Context, b *supervisor.Box, p string) (io.ReadCloser, error)
}

// archiveOut reports whether the launch's copy-out goes by the
// runtime's archive: only from a box with a writable root, whose /tmp
// is its layer's (an engine's archive endpoint does not see the box's
// tmpfs mounts); frames carry it otherwise.
func (c *Copies) archiveOut(ctx context.Context) bool {
	a, ok := c.l.Runtime.(ArchiveExporter)
	return len(c.Options.Out) > 0 && ok && c.l.Box.ReadWriteRoot && a.CanGetArchive(ctx)
}

// manifestTree is one copy-out tree's manifest as the watcher sends
// it: its frames, replayed as they come (a replayed frame is let go).
type manifestTree struct {
	root         uint32
	frames       []shared.Frame
	entries      int64
	files, bytes int64
	start        time.Time
	ended        bool
}

// collect takes one copy-out frame of an archive copy-out. A malformed
// frame is a protocol error (the stream is broken); the bounds and the
// watcher's refusals fail the copy-out (the fetch stops and removes
// what it wrote: collect never touches the receiver it writes with). The first tree's first frame
// starts the fetch, which replays each tree while the watcher is still
// walking and hashing it (both go in the same order), so the engine's
// read and the watcher's hashing overlap.
func (c *Copies) collect(f shared.Frame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.manifests == nil {
		c.manifests = map[uint32]*manifestTree{}
		c.more = sync.NewCond(&c.mu)
	}
	var m *manifestTree
	for _, t := range c.manifests {
		if !t.ended {
			m = t
		}
	}
	switch f.Type {
	case shared.FrameCopyOutEntry:
		e, err := shared.ParseCopyEntry(f.Payload)
		if err != nil {
			return err
		}
		if e.Path == "" {
			if int(e.Root) >= len(c.Options.Out) || c.manifests[e.Root] != nil || m != nil {
				return &shared.ProtocolError{Reason: fmt.Sprintf("copy-out root %d: not asked for, sent twice, or inside another", e.Root)}
			}
			m = &manifestTree{root: e.Root, start: time.Now()}
			c.manifests[e.Root] = m
		}
		if m == nil || e.Root != m.root {
			return &shared.ProtocolError{Reason: "copy-out-entry " + e.Path + " outside a tree"}
		}
		m.entries++
		if e.Kind == shared.CopyFile {
			m.files++
			m.bytes += e.Size
		}
		box := c.Options.Out[m.root].Box
		switch max := c.maxEntries; {
		case max > 0 && m.entries > max:
			c.refuseLocked(&shared.CopyRefusedError{Reason: box + ": " + shared.EntryLimitReason(max)})
		case c.limit > 0 && m.bytes > c.limit:
			c.refuseLocked(&shared.CopyRefusedError{Reason: box + ": the tree exceeds the limit of " + shared.FormatSize(c.limit) + " (refused whole, nothing kept)"})
		}
	case shared.FrameCopyOutSum:
		if m == nil {
			return &shared.ProtocolError{Reason: "copy-out-sum outside a tree"}
		}
		if _, err := shared.ParseCopySum(f.Payload); err != nil {
			return err
		}
	case shared.FrameCopyOutEnd:
		e, err := shared.ParseCopyEnd(f.Payload)
		if err != nil {
			return err
		}
		if m == nil && e.Err != "" && int(e.Root) < len(c.Options.Out) && c.manifests[e.Root] == nil {
			// A root the watcher refused before its first entry.
			m = &manifestTree{root: e.Root}
			c.manifests[e.Root] = m
		}
		if m == nil || e.Root != m.root {
			return &shared.ProtocolError{Reason: "copy-out-end for no tree"}
		}
		m.ended = true
		if e.Err != "" {
			c.refuseLocked(&shared.CopyRefusedError{Reason: c.Options.Out[e.Root].Box + ": " + e.Err})
		}
		if int(m.root) == len(c.Options.Out)-1 {
			var first time.Time
			for _, t := range c.manifests {
				if first.IsZero() || (!t.start.IsZero() && t.start.Before(first)) {
					first = t.start
				}
			}
			c.l.Log.Info("copy-out manifests in", "box", c.l.Box.Name, "seconds", time.Since(first).Seconds())
		}
	default:
		return &shared.ProtocolError{Reason: f.Type.String() + " in an archive copy-out (the manifest only was asked for)"}
	}
	if c.err != nil {
		m.frames = nil // nothing will be replayed
	} else {
		m.frames = append(m.frames, f)
	}
	c.more.Broadcast()
	if !c.fetchStarted {
		c.fetchStarted = true
		c.fetching.Add(1)
		go c.fetchAll()
	}
	return nil
}

// stopFetch ends a fetch under way (the stream ended before it did).
func (c *Copies) stopFetch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fetchStopped = true
	if c.cancelFetch != nil {
		c.cancelFetch()
	}
	if c.more != nil {
		c.more.Broadcast()
	}
}

// nextFrame waits for frame i of m; false: the copy-out failed, or the
// stream ended before the frame came.
func (c *Copies) nextFrame(m *manifestTree, i int) (shared.Frame, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i >= len(m.frames) && !m.ended && c.err == nil && !c.fetchStopped {
		c.more.Wait()
	}
	if c.err != nil || c.fetchStopped || i >= len(m.frames) {
		return shared.Frame{}, false
	}
	f := m.frames[i]
	m.frames[i] = shared.Frame{}
	return f, true
}

// tree waits for root's manifest to begin (nil: failed or stopped).
func (c *Copies) tree(root uint32) *manifestTree {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.manifests[root] == nil && c.err == nil && !c.fetchStopped {
		c.more.Wait()
	}
	if c.err != nil || c.fetchStopped {
		return nil
	}
	return c.manifests[root]
}

// fetchAll reads every tree from the runtime as its manifest comes,
// then lets the watcher go.
func (c *Copies) fetchAll() {
	defer c.fetching.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.mu.Lock()
	c.cancelFetch = cancel
	c.mu.Unlock()
	crashpoint.At(crashpoint.BeforeFetch)
	for i := range c.Options.Out {
		m := c.tree(uint32(i))
		if m == nil {
			break
		}
		if err := c.fetch(ctx, m); err != nil {
			c.fail(err)
			break
		}
	}
	// A failure collect saw (a bound, the watcher's refusal) is cleaned
	// up here, where the results are written.
	c.mu.Lock()
	if c.err != nil {
		c.removeResults()
	}
	c.mu.Unlock()
	if err := c.w.Send(shared.FrameCopyOutFetched, nil); err != nil {
		c.l.Log.Debug("send copy-out-fetched", "err", err)
	}
}

// errCutShort is a manifest the stream ended inside of.
var errCutShort = &shared.CopyRefusedError{Reason: "the box's stream ended inside its copy-out manifest"}

// fetch replays m into a receiver, each file's bytes read from the
// runtime's archive of the tree (asked for at the first file).
func (c *Copies) fetch(ctx context.Context, m *manifestTree) error {
	if err := c.openTree(m.root); err != nil {
		return err
	}
	t := c.current()
	co := c.Options.Out[m.root]
	t.start = m.start
	var a *archiveFiles
	seen := map[string]bool{} // the paths replayed so far
	for i := 0; ; i++ {
		f, ok := c.nextFrame(m, i)
		if !ok {
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			if err == nil {
				err = errCutShort
			}
			return err
		}
		c.moved()
		done, _, err := t.recv.Frame(shared.CopyOutFrames, f)
		if err == nil && f.Type == shared.FrameCopyOutEntry {
			e, _ := shared.ParseCopyEntry(f.Payload)
			seen[e.Path] = true
			if e.Kind == shared.CopyFile && a == nil {
				rc, gerr := c.l.Runtime.(ArchiveExporter).GetArchive(ctx, c.l.Box, co.Box)
				if gerr != nil {
					return gerr
				}
				defer rc.Close()
				// Read ahead by a goroutine of its own: the engine's socket is
				// read while the last piece is hashed and written.
				ra := newReadAhead(rc, 1<<20, 4)
				defer ra.Close()
				a = &archiveFiles{tr: tar.NewReader(ra), base: path.Base(co.Box), paths: seen}
			}
			if e.Kind == shared.CopyFile {
				err = a.feed(e, func(d shared.CopyData) error {
					c.moved()
					return t.recv.Data(d)
				})
			}
		}
		if err != nil {
			return treeErr(t, err)
		}
		if done {
			dropped, err := a.drain()
			if err != nil {
				return treeErr(t, err)
			}
			c.finishTree(t, TransportArchive, dropped)
			return nil
		}
	}
}

// treeErr names the tree in a refusal.
func treeErr(t *exportTree, err error) error {
	var refused *shared.CopyRefusedError
	if errors.As(err, &refused) {
		return &shared.CopyRefusedError{Reason: t.c.Box + ": " + refused.Reason}
	}
	return err
}

// archiveFiles finds a tree's files in the runtime's tar stream, in
// the manifest's order (the watcher's walk and the engine's both go
// depth first, each folder's names sorted): an entry before the one
// looked for that the manifest does not name is dropped; a file the
// manifest names that never comes (or not where the order puts it)
// fails the copy.
type archiveFiles struct {
	tr      *tar.Reader
	base    string          // the tree's name in the stream
	paths   map[string]bool // what the manifest named up to here
	dropped int
	buf     []byte
}

// rel is a stream name's path in the tree ("" the root; false: not in it).
func (a *archiveFiles) rel(name string) (string, bool) {
	name = strings.TrimSuffix(name, "/")
	if name == a.base {
		return "", true
	}
	return strings.CutPrefix(name, a.base+"/")
}

// name is p as the receiver names it: below the tree's base.
func (a *archiveFiles) name(p string) string {
	if p == "" {
		return a.base
	}
	return a.base + "/" + p
}

// feed finds e's bytes in the stream and gives them as copy-data (not
// framed: no copy of the bytes); a run of whole 4 KiB blocks of zeros is not sent (the
// receiver hashes it as zeros and leaves a hole: a sparse file comes
// back sparse, as by frames).
func (a *archiveFiles) feed(e shared.CopyEntry, data func(shared.CopyData) error) error {
	for {
		h, err := a.tr.Next()
		if err == io.EOF {
			return &shared.VerifyError{Reason: a.name(e.Path) + ": in the manifest, not in the archive (or not in the manifest's order)"}
		}
		if err != nil {
			return fmt.Errorf("copy-out: read the archive: %w", err)
		}
		p, in := a.rel(h.Name)
		if in && p == e.Path && (h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA) {
			if h.Size != e.Size {
				return &shared.VerifyError{Reason: fmt.Sprintf("%s: %d bytes in the archive, %d in the manifest", a.name(e.Path), h.Size, e.Size)}
			}
			break
		}
		if !in || !a.paths[p] {
			a.dropped++
		}
	}
	if a.buf == nil {
		a.buf = make([]byte, shared.CopyChunk)
	}
	for off := int64(0); off < e.Size; {
		n, err := io.ReadFull(a.tr, a.buf[:min(int64(len(a.buf)), e.Size-off)])
		if err != nil {
			return fmt.Errorf("copy-out: read %s from the archive: %w", a.name(e.Path), err)
		}
		b := a.buf[:n]
		for i := 0; i < n; {
			for i+shared.HoleBlock <= n && shared.IsZeroBlock(b[i:i+shared.HoleBlock]) {
				i += shared.HoleBlock
			}
			j := i
			for j < n && !(j+shared.HoleBlock <= n && shared.IsZeroBlock(b[j:j+shared.HoleBlock])) {
				j = min(j+shared.HoleBlock, n)
			}
			if j > i {
				if err := data(shared.CopyData{Offset: off + int64(i), Bytes: b[i:j]}); err != nil {
					return err
				}
			}
			i = j
		}
		off += int64(n)
	}
	return nil
}

// drain reads the rest of the stream: what the manifest does not name
// is counted as dropped.
func (a *archiveFiles) drain() (int, error) {
	if a == nil {
		return 0, nil
	}
	for {
		h, err := a.tr.Next()
		if err == io.EOF {
			return a.dropped, nil
		}
		if err != nil {
			return a.dropped, fmt.Errorf("copy-out: read the archive: %w", err)
		}
		if p, in := a.rel(h.Name); !in || !a.paths[p] {
			a.dropped++
		}
	}
}

// readAhead reads r by a goroutine of its own into n buffers of size
// bytes (a pipelined the goroutine fills), ahead of its reader.
type readAhead struct {
	p    *pipelined
	r    io.ReadCloser
	done chan struct{}
}

func newReadAhead(r io.ReadCloser, size, n int) *readAhead {
	a := &readAhead{p: newPipelined(size, n), r: r, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		_, err := a.p.ReadFrom(r)
		a.p.CloseWithError(err)
	}()
	return a
}

func (a *readAhead) Read(b []byte) (int, error) { return a.p.Read(b) }

// Close closes the stream under it and waits for the goroutine.
func (a *readAhead) Close() {
	a.r.Close()
	a.p.Stop()
	for range a.p.full {
	}
	<-a.done
}
