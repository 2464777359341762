package copy

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/internal/crashpoint"
	"golang.org/x/sys/unix"
)

const copySupported = true

// sendIn sends the copy-in trees right after the spec. An error is the
// stream's (the box is gone) or a host tree that cannot be read, which
// the watcher is told of (copy-end with the reason) and ends the box
// for.
func (c *Copies) sendIn(w *shared.Writer) error {
	defer close(c.inDone)
	s := &shared.CopySender{
		Frames: shared.CopyInFrames,
		Send:   func(t shared.FrameType, p []byte) error { c.moved(); return w.Send(t, p) },
		Skipped: func(p string, mode uint32) {
			c.l.Say("copy-in: %s: not a folder, file or symlink (mode %o); not sent", p, mode)
		},
	}
	if c.archiveIn {
		err := c.stageArchive(c.ctx)
		var refused *shared.CopyRefusedError
		switch {
		case errors.As(err, &refused):
			// As a frame copy: the watcher is told, and ends the box
			// (copy-refused).
			end := shared.CopyEnd{Err: refused.Reason}
			if serr := w.Send(shared.FrameCopyInEnd, end.Marshal()); serr != nil {
				return serr
			}
			return err
		case err != nil:
			// The engine failed the put (what landed of it goes with the
			// stage folder): the frames carry the trees instead.
			c.l.Log.Info("copy-in archive put failed; copying in frames", "box", c.l.Box.Name, "err", err)
		default:
			crashpoint.At(crashpoint.AfterStage)
		}
	}
	if a := c.archive; a != nil {
		// The runtime put the trees into the box: their copy-ends only.
		c.mu.Lock()
		c.inStart, c.inFiles, c.inBytes, c.transport = a.start, a.files, a.bytes, TransportArchive
		c.mu.Unlock()
		for _, e := range a.ends {
			if err := w.Send(shared.FrameCopyInLanded, e.Marshal()); err != nil {
				return err
			}
		}
		return nil
	}
	c.mu.Lock()
	c.inStart, c.transport = time.Now(), TransportFrames
	c.mu.Unlock()
	for i, ci := range c.Options.In {
		dfd, name, err := openHostRoot(ci)
		if err != nil {
			return err
		}
		err = s.SendTree(uint32(i), dfd, name)
		unix.Close(dfd)
		c.mu.Lock()
		c.inFiles, c.inBytes = s.Files, s.Bytes
		c.mu.Unlock()
		if err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.inSent = time.Since(c.inStart)
	c.mu.Unlock()
	return nil
}

// openHostRoot opens the folder of a copy-in's host path (a symlink
// followed: the operator named it) and names the tree in it.
func openHostRoot(ci CopyIn) (int, string, error) {
	host, err := filepath.EvalSymlinks(ci.Host)
	if err == nil {
		host, err = filepath.Abs(host)
	}
	if err != nil {
		return -1, "", err
	}
	dir, name := filepath.Split(host)
	if name == "" { // the host's /
		dir, name = "/", "."
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	return dfd, name, err
}

// frame takes one copy-out frame. A protocol error is returned (the
// stream is broken: fail closed); a refusal, a mismatch or a failed
// write fails the copy, and later copy frames are dropped. Either way
// nothing of the copy-out is kept.
func (c *Copies) frame(f shared.Frame) error {
	c.moved()
	if c.archiveOutput {
		// The manifests only: the trees come by the runtime's archive.
		return c.collect(f)
	}
	err := c.take(f)
	if err != nil {
		c.fail(err)
	}
	return err
}

func (c *Copies) take(f shared.Frame) error {
	c.mu.Lock()
	failed := c.err != nil
	c.mu.Unlock()
	if failed {
		return nil
	}
	var root uint32
	if f.Type == shared.FrameCopyOutEntry {
		e, err := shared.ParseCopyEntry(f.Payload)
		if err != nil {
			return err
		}
		root = e.Root
		if e.Path == "" {
			if err := c.openTree(root); err != nil {
				if shared.IsProtocolError(err) {
					return err
				}
				c.fail(err)
				return nil
			}
		}
	}
	t := c.current()
	if t == nil {
		if f.Type == shared.FrameCopyOutEnd {
			// A root the watcher refused before its first entry.
			e, err := shared.ParseCopyEnd(f.Payload)
			if err != nil {
				return err
			}
			if e.Err == "" || int(e.Root) >= len(c.Options.Out) {
				return &shared.ProtocolError{Reason: "copy-out-end for no tree"}
			}
			c.fail(&shared.CopyRefusedError{Reason: c.Options.Out[e.Root].Box + ": " + e.Err})
			return nil
		}
		return &shared.ProtocolError{Reason: f.Type.String() + " outside a tree"}
	}
	done, _, err := t.recv.Frame(shared.CopyOutFrames, f)
	if err != nil {
		if shared.IsProtocolError(err) {
			return err
		}
		c.fail(treeErr(t, err))
		return nil
	}
	if done {
		c.finishTree(t, TransportFrames, 0)
	}
	return nil
}

// current is the tree a frame belongs to: the last one opened.
func (c *Copies) current() *exportTree {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.out {
		if t.root >= 0 {
			return t
		}
	}
	return nil
}

// openTree starts receiving root: its HOSTDIR by descriptor, its
// result name made fresh (O_EXCL semantics: never an existing one).
func (c *Copies) openTree(root uint32) error {
	if int(root) >= len(c.Options.Out) {
		return &shared.ProtocolError{Reason: fmt.Sprintf("copy-out root %d was not asked for", root)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out == nil {
		c.out = map[uint32]*exportTree{}
	}
	if _, dup := c.out[root]; dup {
		return &shared.ProtocolError{Reason: fmt.Sprintf("copy-out root %d sent twice", root)}
	}
	for _, t := range c.out {
		if t.root >= 0 {
			return &shared.ProtocolError{Reason: "copy-out: a tree began inside another"}
		}
	}
	co := c.Options.Out[root]
	fd, err := unix.Open(co.HostDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("copy-out %s: %w", co.HostDir, err)
	}
	bases := make([]string, len(c.Options.Out))
	bases[root] = path.Base(co.Box)
	t := &exportTree{c: co, start: time.Now(), root: fd, recv: &shared.CopyReceiver{
		Root: fd, Bases: bases, Limit: c.limit, MaxEntries: c.maxEntries, Symlink: shared.SymlinkStaysInside,
		// The controller's files: its own (the supervisor makes them),
		// never writable by the host's group or others.
		ClearMode: 0o022,
	}}
	c.out[root] = t
	return nil
}

func (t *exportTree) close() {
	if t.root >= 0 {
		t.recv.Close()
		unix.Close(t.root)
		t.root = -1
	}
}

// finishTree writes the verified tree's manifest beside it and says so;
// dropped counts the archive's entries the manifest did not name.
func (c *Copies) finishTree(t *exportTree, transport string, dropped int) {
	took := time.Since(t.start)
	c.l.Emit(supervisor.Event{Event: supervisor.EventExported, Transport: transport, Path: t.c.Result(), Files: t.recv.Files, Bytes: t.recv.Bytes, Seconds: took.Seconds()})
	fd, err := unix.Openat(t.root, path.Base(t.c.Manifest()), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err == nil {
		f := os.NewFile(uintptr(fd), t.c.Manifest())
		_, err = f.Write(t.recv.Manifest())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	c.mu.Lock()
	t.close()
	c.mu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("copy-out %s: write the manifest: %w", t.c.Manifest(), err))
		return
	}
	for _, r := range t.recv.Refused {
		c.l.Say("copy-out %s: symlink %s leaves the exported tree; refused (not made)", t.c.Box, strings.TrimSpace(r))
	}
	c.mu.Lock()
	c.outDone++
	c.mu.Unlock()
	if dropped > 0 {
		c.l.Say("copy-out %s: %d entries of the archive are not in the watcher's manifest; dropped", t.c.Box, dropped)
	}
	c.l.Emit(supervisor.Event{Event: supervisor.EventVerified, Transport: transport, Path: t.c.Manifest(), Files: t.recv.Files, Bytes: t.recv.Bytes, Seconds: took.Seconds(), Refused: len(t.recv.Refused), Dropped: dropped})
}
