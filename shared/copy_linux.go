package shared

import (
	"bytes"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// The two ends of a copy, the same code on both sides: the supervisor
// sends a host tree in and receives the box's out; the watcher
// receives the host's in and sends the box's out.

// CopySender sends trees as copy frames.
type CopySender struct {
	Frames CopyFrames
	Send   func(t FrameType, payload []byte) error
	// Limit refuses a tree whose files add up to more bytes (0: none).
	Limit int64
	// MaxEntries refuses a tree of more entries (0: none).
	MaxEntries int64
	// Skipped is told of an object that is neither a folder, a file nor
	// a symlink (a FIFO, a socket, a device): it is not sent.
	Skipped func(p string, mode uint32)
	// Allow, when set, decides whether a regular file (its owner, its
	// mode) is sent; one it refuses goes to Skipped.
	Allow func(uid, mode uint32) bool
	// ManifestOnly reads and hashes every file but sends no copy-data:
	// the data goes another way (an archive copy-out).
	ManifestOnly bool
	// Known, when set, is a file's digest already known (hashed ahead
	// as it landed: LandingSums) for the file at p as the walk's stat st
	// (nothing followed) says it is now; nil: it is opened, read and
	// hashed. A known file is not opened and sends no copy-data.
	Known func(p string, st *unix.Stat_t) []byte
	// Data, when set, takes each piece of a file's data instead of Send
	// (a copy-data frame): no copy of the bytes, which are the sender's
	// buffer until it returns.
	Data func(d CopyData) error
	// Entry, when set, is told of each entry before it is sent, with
	// what the walk's stat said of it (a file's: fstat of the open file).
	Entry func(c CopyEntry, st *unix.Stat_t) error

	Files, Bytes int64 // of every tree sent so far
	buf          []byte
	frame        []byte
}

// SendTree sends the object name in folder dirfd, and everything below
// it, as root number root. It never follows a symlink (the root's own
// name included: a root that is a symlink is sent as one), and opens
// everything relative to its folder's descriptor, so nothing renamed
// under it can redirect a read. An error from Send is returned as is;
// a tree over Limit, or one that cannot be read, is ended with copy-end
// carrying the error, and returned as a *CopyRefusedError.
func (s *CopySender) SendTree(root uint32, dirfd int, name string) error {
	t := treeSend{s: s, root: root, links: map[[2]uint64]string{}, files0: s.Files, bytes0: s.Bytes}
	err := t.walk(dirfd, name, "")
	var refused *CopyRefusedError
	if err != nil && !errors.As(err, &refused) {
		return err
	}
	end := CopyEnd{Root: root, Files: s.Files - t.files0, Bytes: s.Bytes - t.bytes0}
	if refused != nil {
		end.Err = refused.Reason
	} else {
		end.Manifest = t.manifest.Sum(nil)
	}
	if serr := s.Send(s.Frames.End, end.Marshal()); serr != nil {
		return serr
	}
	return err
}

type treeSend struct {
	s              *CopySender
	root           uint32
	links          map[[2]uint64]string
	manifest       manifestHash
	files0, bytes0 int64
	entries        int64
}

type manifestHash struct{ h hash.Hash }

func (m *manifestHash) add(line string) {
	if m.h == nil {
		m.h = NewSHA256()
	}
	io.WriteString(m.h, line)
}

func (m *manifestHash) Sum(b []byte) []byte {
	if m.h == nil {
		m.h = NewSHA256()
	}
	return m.h.Sum(b)
}

func (t *treeSend) refuse(p, why string) error {
	if p == "" {
		p = "."
	}
	return &CopyRefusedError{Reason: p + ": " + why}
}

// count counts one more entry of the tree, refusing it past MaxEntries.
func (t *treeSend) count(p string) error {
	t.entries++
	if t.s.MaxEntries > 0 && t.entries > t.s.MaxEntries {
		return t.refuse(p, EntryLimitReason(t.s.MaxEntries))
	}
	return nil
}

// EntryLimitReason says a tree went past an entry limit.
func EntryLimitReason(n int64) string {
	return "the tree exceeds the limit of " + utoa(uint64(n)) + " entries (refused whole, nothing kept)"
}

func (t *treeSend) entry(c CopyEntry, st *unix.Stat_t, sum []byte) error {
	if err := t.count(c.Path); err != nil {
		return err
	}
	c.Root = t.root
	if t.s.Entry != nil {
		if err := t.s.Entry(c, st); err != nil {
			return err
		}
	}
	t.manifest.add(ManifestLine(c, sum))
	return t.s.Send(t.s.Frames.Entry, c.Marshal())
}

func (t *treeSend) walk(dirfd int, name, p string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return t.refuse(p, "stat: "+err.Error())
	}
	mode := st.Mode & CopyModeMask
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return t.refuse(p, "open: "+err.Error())
		}
		defer unix.Close(fd)
		if err := t.entry(CopyEntry{Path: p, Kind: CopyDir, Mode: mode}, &st, nil); err != nil {
			return err
		}
		names, err := readNames(fd)
		if err != nil {
			return t.refuse(p, "read folder: "+err.Error())
		}
		for _, n := range names {
			if err := t.walk(fd, n, joinRel(p, n)); err != nil {
				return err
			}
		}
		return nil
	case unix.S_IFLNK:
		target, err := readlinkat(dirfd, name)
		if err != nil {
			return t.refuse(p, "readlink: "+err.Error())
		}
		return t.entry(CopyEntry{Path: p, Kind: CopySymlink, Link: target}, &st, nil)
	case unix.S_IFREG:
		if t.s.Allow != nil && !t.s.Allow(st.Uid, st.Mode) {
			break
		}
		key := [2]uint64{uint64(st.Dev), st.Ino}
		if first, ok := t.links[key]; ok && p != "" {
			return t.entry(CopyEntry{Path: p, Kind: CopyHardlink, Link: first}, &st, nil)
		}
		if st.Nlink > 1 && p != "" {
			t.links[key] = p
		}
		return t.file(dirfd, name, p, mode, &st)
	}
	if t.s.Skipped != nil {
		t.s.Skipped(p, st.Mode)
	}
	return nil
}

// file sends the regular file name in dirfd; wst is the walk's stat of
// it.
func (t *treeSend) file(dirfd int, name, p string, mode uint32, wst *unix.Stat_t) error {
	// A file whose digest is known (hashed ahead, and the same inode
	// unchanged since, as the walk's stat says: Known compares device,
	// inode, size, modification and change times) is not read, so not
	// opened. Looked up before the entry is sent: Landed's chmod and
	// chown on it change the file's change time.
	var sum []byte
	if t.s.Known != nil {
		sum = t.s.Known(p, wst)
	}
	st, fd := *wst, -1
	if sum == nil {
		var err error
		if fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err != nil {
			return t.refuse(p, "open: "+err.Error())
		}
		defer unix.Close(fd)
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return t.refuse(p, "changed while it was read")
		}
	}
	size := st.Size
	if t.s.Limit > 0 && t.s.Bytes-t.bytes0+size > t.s.Limit {
		return t.refuse(p, "the tree exceeds the limit of "+FormatSize(t.s.Limit)+" (refused whole, nothing kept)")
	}
	if err := t.count(p); err != nil {
		return err
	}
	c := CopyEntry{Path: p, Kind: CopyFile, Mode: mode, Size: size, Root: t.root}
	if t.s.Entry != nil {
		if err := t.s.Entry(c, &st); err != nil {
			return err
		}
	}
	if err := t.s.Send(t.s.Frames.Entry, c.Marshal()); err != nil {
		return err
	}
	if sum == nil {
		var err error
		if sum, err = t.hash(fd, p, size); err != nil {
			return err
		}
	}
	if err := t.s.Send(t.s.Frames.Sum, sum); err != nil {
		return err
	}
	t.manifest.add(ManifestLine(c, sum))
	t.s.Files++
	t.s.Bytes += size
	return nil
}

// hash reads the open file fd (path p, size bytes) by its data extents,
// holes read as zeros, sends its data unless ManifestOnly, and returns
// its SHA-256.
func (t *treeSend) hash(fd int, p string, size int64) ([]byte, error) {
	h := NewSHA256()
	if len(t.s.buf) < CopyChunk {
		t.s.buf = make([]byte, CopyChunk)
	}
	buf := t.s.buf
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil || data > size {
			// ENXIO: no data past off (a hole to the end); EINVAL: a file
			// system without SEEK_DATA reads as all data.
			if errors.Is(err, unix.EINVAL) {
				data = off
			} else {
				data = size
			}
		}
		hashZeros(h, data-off)
		if data >= size {
			break
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil || hole > size {
			hole = size
		}
		for data < hole {
			n, err := unix.Pread(fd, buf[:min(int64(len(buf)), hole-data)], data)
			if err != nil || n == 0 {
				return nil, t.refuse(p, "changed while it was read (short read)")
			}
			h.Write(buf[:n])
			data += int64(n)
			if t.s.ManifestOnly {
				continue
			}
			if t.s.Data != nil {
				if err := t.s.Data(CopyData{Offset: data - int64(n), Bytes: buf[:n]}); err != nil {
					return nil, err
				}
				continue
			}
			t.s.frame = AppendCopyData(t.s.frame[:0], data-int64(n), buf[:n])
			if err := t.s.Send(t.s.Frames.Data, t.s.frame); err != nil {
				return nil, err
			}
		}
		off = hole
	}
	return h.Sum(nil), nil
}

// zeros is read-only: an array, not a make at init (a 64 KiB heap
// object every process of both binaries would pay for on its start).
var zeros [64 << 10]byte

func hashZeros(h hash.Hash, n int64) {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		h.Write(zeros[:k])
		n -= k
	}
}

func joinRel(p, n string) string {
	if p == "" {
		return n
	}
	return p + "/" + n
}

// readNames lists a folder by its descriptor, sorted.
func readNames(fd int) ([]string, error) {
	names, err := readDirNames(fd)
	sort.Strings(names)
	return names, err
}

func readlinkat(dirfd int, name string) (string, error) {
	for n := 256; n <= MaxCopyPath*2; n *= 2 {
		b := make([]byte, n)
		k, err := unix.Readlinkat(dirfd, name, b)
		if err != nil {
			return "", err
		}
		if k < n {
			return string(b[:k]), nil
		}
	}
	return "", errors.New("target too long")
}

// CopyReceiver writes the trees of copy frames beneath a folder. Every
// path is resolved from Root with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), and every object is
// made with O_EXCL / O_NOFOLLOW semantics, so that nothing planted in
// the way (a symlink, a bind mount's magic link, a "..") can send a
// write outside Root. Files are made owner-only and get their mode
// (and owner, with Chown) once complete; folders once their tree ends.
type CopyReceiver struct {
	Root int // the folder everything is written beneath
	// Bases are where each root lands, relative to Root (clean, not "").
	Bases []string
	// Chown gives every object written to UID:GID.
	Chown    bool
	UID, GID int
	// ClearMode are mode bits cleared on every folder and file made
	// (a copy-out's 0o022: nothing of the box's lands writable by the
	// host's group or others), in the modes set and in the manifest
	// written; the sender's manifest is verified as it was sent.
	ClearMode uint32
	// Symlink decides a symlink at p with target t: true makes it, false
	// refuses it (it is not made, and Refused lists it). Nil makes all.
	Symlink func(p, t string) bool
	// Limit refuses a tree whose files add up to more bytes (0: none).
	Limit int64
	// MaxEntries refuses a tree of more entries (0: none): what the
	// receiver keeps per entry (its path twice, a manifest line) is
	// bounded by it.
	MaxEntries int64

	// Landing, when set, holds the digests of landed files hashed ahead
	// (Landed reads again only what it does not know unchanged).
	Landing *LandingSums

	Refused      []string // symlinks not made: "path -> target"
	Files, Bytes int64    // of every tree received so far

	cur      *treeRecv
	manifest []byte
}

type treeRecv struct {
	root   uint32
	base   string
	files  int64
	bytes  int64
	man    manifestHash
	text   bytes.Buffer
	dirs   []CopyEntry
	known  map[string]CopyKind
	file   int // the open file, -1 none
	entry  CopyEntry
	off    int64
	h      hash.Hash
	wanted int
}

// Manifest is the text of the last tree completed.
func (r *CopyReceiver) Manifest() []byte { return r.manifest }

// Frame takes one copy frame of the direction f. It returns done when a
// tree ended (copy-end). Errors: *ProtocolError (malformed, out of
// order, a path outside the tree), *VerifyError, *CopyRefusedError;
// anything else is a write that failed.
func (r *CopyReceiver) Frame(f CopyFrames, fr Frame) (done bool, root uint32, err error) {
	switch fr.Type {
	case f.Entry:
		return false, 0, r.entry(fr.Payload)
	case f.Data:
		return false, 0, r.data(fr.Payload)
	case f.Sum:
		return false, 0, r.sum(fr.Payload)
	case f.End:
		root, err := r.end(fr.Payload)
		return err == nil, root, err
	}
	return false, 0, &ProtocolError{Reason: "not a copy frame: " + fr.Type.String()}
}

// Close lets go of a file left open by a tree that did not end.
func (r *CopyReceiver) Close() {
	if r.cur != nil && r.cur.file >= 0 {
		unix.Close(r.cur.file)
		r.cur.file = -1
	}
}

func protoErr(why string) error { return &ProtocolError{Reason: why} }

// entry takes a copy-entry: it checks the entry's place in the tree,
// then makes the object it names beneath its parent folder.
func (r *CopyReceiver) entry(b []byte) error {
	c, err := ParseCopyEntry(b)
	if err != nil {
		return err
	}
	t, err := r.place(c)
	if err != nil {
		return err
	}
	full := t.base
	if c.Path != "" {
		full += "/" + c.Path
	}
	parent, name := splitParent(full)
	pfd, err := r.openDir(parent, c.Path == "")
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	switch c.Kind {
	case CopyDir:
		return r.makeDir(t, c, pfd, name, full)
	case CopyFile:
		return r.openFile(t, c, pfd, name, full)
	case CopySymlink:
		return r.makeSymlink(t, c, pfd, name, full)
	case CopyHardlink:
		return r.makeHardlink(t, c, pfd, name, full)
	}
	return nil
}

// place checks where entry c comes in the stream (a root entry starts a
// tree, any other continues the current one after its folder, once
// each, within MaxEntries) and records it as known.
func (r *CopyReceiver) place(c CopyEntry) (*treeRecv, error) {
	t := r.cur
	if t != nil && t.file >= 0 {
		return nil, protoErr("copy-entry " + c.Path + " before the copy-sum of " + t.entry.Path)
	}
	if c.Path == "" {
		if t != nil {
			return nil, protoErr("copy-entry: a second root entry before copy-end")
		}
		if int(c.Root) >= len(r.Bases) {
			return nil, protoErr("copy-entry: root " + utoa(uint64(c.Root)) + " was not asked for")
		}
		if c.Kind == CopyHardlink {
			return nil, protoErr("copy-entry: the root is a hard link")
		}
		t = &treeRecv{root: c.Root, base: r.Bases[c.Root], known: map[string]CopyKind{}, file: -1}
		r.cur = t
	} else if t == nil || c.Root != t.root {
		return nil, protoErr("copy-entry " + c.Path + " outside a tree")
	}
	if r.MaxEntries > 0 && int64(len(t.known)) >= r.MaxEntries {
		return nil, &CopyRefusedError{Reason: EntryLimitReason(r.MaxEntries)}
	}
	if _, dup := t.known[c.Path]; dup {
		return nil, protoErr("copy-entry: " + c.Path + " sent twice")
	}
	if c.Path != "" {
		if t.known[path.Dir(c.Path)] != CopyDir && !(path.Dir(c.Path) == "." && t.known[""] == CopyDir) {
			return nil, protoErr("copy-entry: " + c.Path + " before its folder")
		}
	}
	t.known[c.Path] = c.Kind
	return t, nil
}

// makeDir makes the folder (one already there will do); its
// mode comes when its tree ends.
func (r *CopyReceiver) makeDir(t *treeRecv, c CopyEntry, pfd int, name, full string) error {
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
		var st unix.Stat_t
		if err != unix.EEXIST || unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return &CopyRefusedError{Reason: full + ": cannot make the folder: " + err.Error()}
		}
	}
	t.dirs = append(t.dirs, c)
	t.man.add(ManifestLine(c, nil))
	t.text.WriteString(ManifestLine(r.landed(c), nil))
	return nil
}

// openFile creates the file for the copy-data frames that follow, within
// the tree's Limit.
func (r *CopyReceiver) openFile(t *treeRecv, c CopyEntry, pfd int, name, full string) error {
	if r.Limit > 0 && t.bytes+c.Size > r.Limit {
		return &CopyRefusedError{Reason: "the tree exceeds the limit of " + FormatSize(r.Limit) + " (refused whole, nothing kept)"}
	}
	fd, err := createExcl(pfd, name)
	if err != nil {
		return &CopyRefusedError{Reason: full + ": " + err.Error()}
	}
	t.file, t.entry, t.off, t.h = fd, c, 0, NewSHA256()
	return nil
}

// makeSymlink makes the symlink unless Symlink refuses it; either way it
// is in the manifest.
func (r *CopyReceiver) makeSymlink(t *treeRecv, c CopyEntry, pfd int, name, full string) error {
	line := ManifestLine(c, nil)
	t.man.add(line)
	t.text.WriteString(line)
	if r.Symlink != nil && !r.Symlink(c.Path, c.Link) {
		r.Refused = append(r.Refused, c.Path+" -> "+c.Link)
		return nil
	}
	if err := unix.Symlinkat(c.Link, pfd, name); err != nil {
		return &CopyRefusedError{Reason: full + ": symlink: " + err.Error()}
	}
	if r.Chown {
		if err := unix.Fchownat(pfd, name, r.UID, r.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &CopyRefusedError{Reason: full + ": chown: " + err.Error()}
		}
	}
	return nil
}

// makeHardlink links to an earlier file of the same tree.
func (r *CopyReceiver) makeHardlink(t *treeRecv, c CopyEntry, pfd int, name, full string) error {
	if t.known[c.Link] != CopyFile {
		return protoErr("copy-entry: hard link " + c.Path + " to " + c.Link + ", not an earlier file")
	}
	oparent, oname := splitParent(t.base + "/" + c.Link)
	ofd, err := r.openDir(oparent, false)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	if err := unix.Linkat(ofd, oname, pfd, name, 0); err != nil {
		return &CopyRefusedError{Reason: full + ": link: " + err.Error()}
	}
	line := ManifestLine(c, nil)
	t.man.add(line)
	t.text.WriteString(line)
	// A hard link is no file of its own: known as a link, it cannot be
	// linked to.
	t.known[c.Path] = CopyHardlink
	return nil
}

// createExcl makes a new file, owner-only; an object already there
// that is not a folder (left by the image, or planted) is unlinked,
// never followed.
func createExcl(pfd int, name string) (int, error) {
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(pfd, name, flags, 0o600)
	if err == unix.EEXIST {
		if uerr := unix.Unlinkat(pfd, name, 0); uerr != nil {
			return -1, errors.New("exists and cannot be replaced: " + uerr.Error())
		}
		fd, err = unix.Openat(pfd, name, flags, 0o600)
	}
	return fd, err
}

func splitParent(full string) (string, string) {
	i := strings.LastIndexByte(full, '/')
	if i < 0 {
		return ".", full
	}
	return full[:i], full[i+1:]
}

// openDir opens a folder beneath Root without following any symlink.
// mkParents makes the missing ones on the way (owner-only, the
// receiver's own; for the base's parents only).
func (r *CopyReceiver) openDir(p string, mkParents bool) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(r.Root, p, how)
	if err == nil || !mkParents || err != unix.ENOENT {
		if err != nil {
			return -1, &CopyRefusedError{Reason: p + ": " + err.Error() + " (a folder on the way is missing, or a symlink, or outside)"}
		}
		return fd, nil
	}
	fd, err = unix.Openat2(r.Root, ".", how)
	if err != nil {
		return -1, &CopyRefusedError{Reason: ".: " + err.Error()}
	}
	for _, c := range strings.Split(p, "/") {
		if err := unix.Mkdirat(fd, c, 0o755); err != nil && err != unix.EEXIST {
			unix.Close(fd)
			return -1, &CopyRefusedError{Reason: p + ": mkdir " + c + ": " + err.Error()}
		}
		next, err := unix.Openat2(fd, c, how)
		unix.Close(fd)
		if err != nil {
			return -1, &CopyRefusedError{Reason: p + ": " + c + ": " + err.Error() + " (a symlink on the way?)"}
		}
		fd = next
	}
	return fd, nil
}

func (r *CopyReceiver) data(b []byte) error {
	d, err := ParseCopyData(b)
	if err != nil {
		return err
	}
	return r.Data(d)
}

// Data takes the bytes of one copy-data not framed (an archive
// copy-out's, read from the engine's stream): as a copy-data frame,
// 1 to CopyChunk bytes, in order, within the file's size.
func (r *CopyReceiver) Data(d CopyData) error {
	if len(d.Bytes) == 0 || len(d.Bytes) > CopyChunk || d.Offset < 0 {
		return protoErr("copy-data: want 1-" + itoa(CopyChunk) + " bytes at an offset")
	}
	t := r.cur
	if t == nil || t.file < 0 {
		return protoErr("copy-data outside a file")
	}
	if d.Offset < t.off || d.Offset+int64(len(d.Bytes)) > t.entry.Size {
		return protoErr("copy-data for " + t.entry.Path + ": bytes " + utoa(uint64(d.Offset)) + "+" + itoa(len(d.Bytes)) + " out of order or past its size")
	}
	hashZeros(t.h, d.Offset-t.off)
	t.h.Write(d.Bytes)
	for w := d.Bytes; len(w) > 0; {
		n, err := unix.Pwrite(t.file, w, d.Offset+int64(len(d.Bytes)-len(w)))
		if err != nil {
			return errors.New(t.base + "/" + t.entry.Path + ": write: " + err.Error())
		}
		w = w[n:]
	}
	t.off = d.Offset + int64(len(d.Bytes))
	return nil
}

func (r *CopyReceiver) sum(b []byte) error {
	want, err := ParseCopySum(b)
	if err != nil {
		return err
	}
	t := r.cur
	if t == nil || t.file < 0 {
		return protoErr("copy-sum outside a file")
	}
	fd := t.file
	t.file = -1
	defer unix.Close(fd)
	hashZeros(t.h, t.entry.Size-t.off)
	got := t.h.Sum(nil)
	where := t.base + "/" + t.entry.Path
	if t.entry.Path == "" {
		where = t.base
	}
	if !bytes.Equal(got, want) {
		return &VerifyError{Reason: where + ": SHA-256 " + hex.EncodeToString(got) + " of what arrived, " + hex.EncodeToString(want) + " sent"}
	}
	if err := unix.Ftruncate(fd, t.entry.Size); err != nil {
		return errors.New(where + ": truncate: " + err.Error())
	}
	if err := r.own(fd, t.entry.Mode); err != nil {
		return errors.New(where + ": " + err.Error())
	}
	t.man.add(ManifestLine(t.entry, got))
	t.text.WriteString(ManifestLine(r.landed(t.entry), got))
	t.files++
	t.bytes += t.entry.Size
	return nil
}

// landed is entry c as it lands (ClearMode cleared).
func (r *CopyReceiver) landed(c CopyEntry) CopyEntry {
	c.Mode &^= r.ClearMode
	return c
}

// own sets an object's mode (ClearMode cleared), then its owner (with
// Chown): the mode first, as the receiver is no longer the owner after.
func (r *CopyReceiver) own(fd int, mode uint32) error {
	if err := unix.Fchmod(fd, mode&^r.ClearMode); err != nil {
		return errors.New("chmod: " + err.Error())
	}
	if r.Chown {
		if err := unix.Fchown(fd, r.UID, r.GID); err != nil {
			return errors.New("chown: " + err.Error())
		}
	}
	return nil
}

func (r *CopyReceiver) end(b []byte) (uint32, error) {
	e, err := ParseCopyEnd(b)
	if err != nil {
		return 0, err
	}
	t := r.cur
	if e.Err != "" {
		// The sender refused this root: whatever came of it is not kept.
		r.Close()
		r.cur = nil
		return e.Root, &CopyRefusedError{Reason: e.Err}
	}
	if t == nil || t.root != e.Root || t.file >= 0 {
		return 0, protoErr("copy-end outside a tree or inside a file")
	}
	r.cur = nil
	// Folders last, deepest first: a read-only folder is filled before
	// it becomes read-only.
	for i := len(t.dirs) - 1; i >= 0; i-- {
		full := t.base
		if p := t.dirs[i].Path; p != "" {
			full += "/" + p
		}
		how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		fd, err := unix.Openat2(r.Root, full, how)
		if err != nil {
			return e.Root, errors.New(full + ": " + err.Error())
		}
		err = r.own(fd, t.dirs[i].Mode)
		unix.Close(fd)
		if err != nil {
			return e.Root, errors.New(full + ": " + err.Error())
		}
	}
	got := t.man.Sum(nil)
	switch {
	case e.Files != t.files || e.Bytes != t.bytes:
		return e.Root, &VerifyError{Reason: t.base + ": " + utoa(uint64(t.files)) + " files of " + utoa(uint64(t.bytes)) + " bytes arrived, " + utoa(uint64(e.Files)) + " of " + utoa(uint64(e.Bytes)) + " sent"}
	case !bytes.Equal(got, e.Manifest):
		return e.Root, &VerifyError{Reason: t.base + ": the manifest of what arrived (SHA-256 " + hex.EncodeToString(got) + ") is not the one sent (" + hex.EncodeToString(e.Manifest) + ")"}
	}
	r.Files += t.files
	r.Bytes += t.bytes
	r.manifest = t.text.Bytes()
	return e.Root, nil
}

// Landed takes a copy-in tree the host put at dirfd/name itself (an
// archive extracted by the engine at CopyStageDir/root): it walks the
// tree with the sender's code, so nothing is followed and the manifest
// is the one a frame copy would carry, and checks it against want, the
// host's copy-in-landed. A digest or a count that differs, or an object
// the host never sends, is a *VerifyError. With Chown every object is
// given to UID:GID on the way (chown also clears set-id bits). The
// verified tree is then renamed to its base beneath Root (its parents
// made, nothing followed, as the frame receiver's); where it cannot be
// (another file system, a non-empty folder in the way) it is written
// through the receiver as a frame copy would be.
func (r *CopyReceiver) Landed(root uint32, dirfd int, name string, want CopyEnd) error {
	if int(root) >= len(r.Bases) || want.Err != "" {
		return protoErr("copy-in-landed: root " + utoa(uint64(root)) + " was not asked for, or has an error")
	}
	var got *CopyEnd
	var odd []string
	var chownErr error
	holes := holePuncher{dirfd: dirfd, fd: -1}
	defer holes.close()
	s := &CopySender{Frames: CopyInFrames,
		Skipped: func(p string, mode uint32) { odd = append(odd, p) },
		Known:   func(p string, st *unix.Stat_t) []byte { return r.Landing.Sum(joinRel(name, p), st) },
		Data:    func(d CopyData) error { holes.data(d); return nil },
		Entry: func(e CopyEntry, st *unix.Stat_t) error {
			// The manifest's mode first (set-id bits, which it does not
			// carry and chown leaves on a folder, go), then the owner:
			// the watcher is no longer the owner after. Each only where
			// the walk's stat says it differs (the host's archive names
			// the agent as owner, and the engine applies it).
			p := joinRel(name, e.Path)
			if (e.Kind == CopyDir || e.Kind == CopyFile) && chownErr == nil && st.Mode&0o7777 != e.Mode {
				chownErr = unix.Fchmodat(dirfd, p, e.Mode, 0)
			}
			if r.Chown && chownErr == nil && (st.Uid != uint32(r.UID) || st.Gid != uint32(r.GID)) {
				chownErr = unix.Fchownat(dirfd, p, r.UID, r.GID, unix.AT_SYMLINK_NOFOLLOW)
			}
			holes.close()
			if e.Kind == CopyFile {
				holes.path = p
			}
			return nil
		},
		Send: func(t FrameType, p []byte) error {
			if t == FrameCopyInEnd {
				e, err := ParseCopyEnd(p)
				if err != nil {
					return err
				}
				got = &e
			}
			return nil
		}}
	// What the hashing ahead left (the last files to land) is hashed
	// now, on every CPU, before the walk changes a mode or an owner.
	r.Landing.Finish(dirfd, name)
	err := s.SendTree(root, dirfd, name)
	where := r.Bases[root]
	var refused *CopyRefusedError
	switch {
	case errors.As(err, &refused):
		return &VerifyError{Reason: where + ": the landed tree cannot be read: " + refused.Reason}
	case err != nil:
		return err
	case len(odd) > 0:
		return &VerifyError{Reason: where + ": " + odd[0] + ": landed, not a folder, file or symlink (never sent)"}
	case got.Files != want.Files || got.Bytes != want.Bytes:
		return &VerifyError{Reason: where + ": " + utoa(uint64(got.Files)) + " files of " + utoa(uint64(got.Bytes)) + " bytes landed, " + utoa(uint64(want.Files)) + " of " + utoa(uint64(want.Bytes)) + " sent"}
	case !bytes.Equal(got.Manifest, want.Manifest):
		return &VerifyError{Reason: where + ": the manifest of what landed (SHA-256 " + hex.EncodeToString(got.Manifest) + ") is not the one sent (" + hex.EncodeToString(want.Manifest) + ")"}
	case chownErr != nil:
		return errors.New(where + ": chown/chmod: " + chownErr.Error())
	}
	parent, base := splitParent(where)
	pfd, err := r.openDir(parent, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	err = unix.Renameat(dirfd, name, pfd, base)
	if err == unix.ENOTDIR || err == unix.EISDIR {
		// Something not a folder in the way of a folder, or the reverse:
		// replaced, as the frame receiver replaces it.
		if uerr := unix.Unlinkat(pfd, base, 0); uerr == nil {
			err = unix.Renameat(dirfd, name, pfd, base)
		}
	}
	if err == nil {
		r.Files += want.Files
		r.Bytes += want.Bytes
		return nil
	}
	if err != unix.EXDEV && err != unix.ENOTEMPTY && err != unix.EEXIST {
		return &CopyRefusedError{Reason: where + ": move the landed tree: " + err.Error()}
	}
	// Written through the receiver, as a frame copy: it hashes again.
	w := &CopySender{Frames: CopyInFrames, Send: func(t FrameType, p []byte) error {
		_, _, err := r.Frame(CopyInFrames, Frame{Type: t, Payload: p})
		return err
	}}
	return w.SendTree(root, dirfd, name)
}

// holePuncher makes the zero blocks of a landed file holes again: a tar
// stream has none (archive/tar writes no sparse entries, and the
// engine's extraction writes what it reads), so a sparse file lands
// whole; its aligned 4 KiB blocks of zeros are punched out as they are
// verified (the content is the same; the disk use is the source's, or
// less). Best effort: a file it cannot open stays whole.
type holePuncher struct {
	dirfd int
	path  string // the file being read ("": none)
	fd    int    // opened at its first zero block (-1: not yet)
	err   bool
}

// HoleBlock is the block a copy leaves as a hole when it is all zeros
// (the frame receiver's punching here; the archive copy-out's reader in
// the supervisor).
const HoleBlock = 4096

var zeroBlock [HoleBlock]byte

// IsZeroBlock reports whether b, one HoleBlock, is all zeros.
func IsZeroBlock(b []byte) bool { return bytes.Equal(b, zeroBlock[:]) }

func (h *holePuncher) data(d CopyData) {
	if h.path == "" || h.err {
		return
	}
	off, b := d.Offset, d.Bytes
	if skip := (HoleBlock - off%HoleBlock) % HoleBlock; skip > 0 {
		if int64(len(b)) <= skip {
			return
		}
		off, b = off+skip, b[skip:]
	}
	var start, n int64 // the run of zero blocks
	flush := func() {
		if n > 0 && !h.err {
			if h.fd < 0 {
				fd, err := unix.Openat(h.dirfd, h.path, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
				if err != nil {
					h.err = true
					return
				}
				h.fd = fd
			}
			if unix.Fallocate(h.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, start, n) != nil {
				h.err = true
			}
		}
		n = 0
	}
	for len(b) >= HoleBlock {
		if IsZeroBlock(b[:HoleBlock]) {
			if n == 0 {
				start = off
			}
			n += HoleBlock
		} else {
			flush()
		}
		off, b = off+HoleBlock, b[HoleBlock:]
	}
	flush()
}

func (h *holePuncher) close() {
	if h.fd >= 0 {
		unix.Close(h.fd)
	}
	h.fd, h.path, h.err = -1, "", false
}
