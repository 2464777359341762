package shared

import (
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
)

// Copy-in and copy-out: a tree carried in frames on the control stream,
// the one channel that reaches the watcher on every runtime, so nothing
// else is created for a copy (no volume, no staging object, no host
// path mounted into the box: nothing for reconcile to find).
//
// A copy is one tree per root, in order. For each root the sender sends
//
//	copy-entry (the root itself, path "") — then one per object below it,
//	  a folder's entry before its contents; a hard link names an earlier
//	  file of the same tree;
//	copy-data (offset, bytes) — a regular file's data extents, ascending,
//	  never overlapping; holes are not sent (SEEK_DATA/SEEK_HOLE);
//	copy-sum (SHA-256) — after every regular file: the digest of its whole
//	  content, holes read as zeros;
//	copy-end (files, bytes, manifest digest, error) — the tree is complete.
//
// Both sides write the manifest (ManifestLine, one line per entry);
// copy-end carries the digest of the sender's, so a lost, added or
// altered entry fails the copy, as does a file that does not hash to
// its copy-sum. Copy-in comes after the spec and before the agent
// starts; copy-out after every process of the box is dead, before the
// exit record, and a copy-end error there is the watcher refusing the
// root (a limit, an unreadable tree): nothing of it is kept.
//
// Each side writes what it receives before it reads the next frame, so
// a slow writer slows the sender and few frames are in memory; pings
// ride between the data frames. A malformed copy frame (a path not clean
// and relative, an unknown kind, data beyond the size or out of order)
// is a protocol error: the box is killed.

// Copy frames, host → box (copy-in) and box → host (copy-out).
const (
	FrameCopyInEntry  FrameType = 0x10
	FrameCopyInData   FrameType = 0x11
	FrameCopyInSum    FrameType = 0x12
	FrameCopyInEnd    FrameType = 0x13
	FrameCopyInLanded FrameType = 0x14
	// FrameCopyOutFetched (host → box, empty): the host has read every
	// copy-out tree by the runtime's archive (Spec.CopyOutArchive); the
	// watcher may send its exit record and go.
	FrameCopyOutFetched FrameType = 0x15
	FrameCopyOutEntry   FrameType = 0x90
	FrameCopyOutData    FrameType = 0x91
	FrameCopyOutSum     FrameType = 0x92
	FrameCopyOutEnd     FrameType = 0x93
)

// copyFrameNames names the copy's frame types (see frameNames).
var copyFrameNames = [...]frameName{
	{FrameCopyInEntry, "copy-in-entry"}, {FrameCopyInData, "copy-in-data"}, {FrameCopyInSum, "copy-in-sum"}, {FrameCopyInEnd, "copy-in-end"}, {FrameCopyInLanded, "copy-in-landed"}, {FrameCopyOutFetched, "copy-out-fetched"},
	{FrameCopyOutEntry, "copy-out-entry"}, {FrameCopyOutData, "copy-out-data"}, {FrameCopyOutSum, "copy-out-sum"}, {FrameCopyOutEnd, "copy-out-end"},
}

// A copy-in tree can also land without its data on the stream: where
// the runtime can put a tar stream into the box while the watcher
// waits for copy-in (the Engine API's archive endpoint, what docker cp
// uses), the host extracts root i at CopyStageDir/i and sends, instead
// of the tree's frames, copy-in-landed: the copy-end (files, bytes,
// manifest digest) of what it put there. The watcher hashes the files
// ahead as they land (LandingSums), then walks the landed tree with
// the sender's own code (no symlink followed), and a digest or count
// that differs, or an object the host never sends (a FIFO, a device),
// fails the copy as verify-failed, exactly as a frame copy's mismatch;
// the verified tree is given to the agent and moved to its box path.

// A copy-out tree can also leave without its data on the stream: where
// the runtime can read a tar stream of the box's files (the Engine
// API's GET /containers/{id}/archive, what docker cp uses), the spec
// says CopyOutArchive and the watcher sends each tree's manifest only:
// the entries, copy-sums and copy-end of a frame copy, no copy-data (it
// still reads and hashes every file, and still decides what may leave:
// Allow, Limit, MaxEntries). It then waits, answering pings, for the
// host's copy-out-fetched before its exit record: the engine removes
// the box when the watcher exits. The host reads the archive and keeps
// a file only where the manifest names it and its bytes hash to the
// manifest's SHA-256; folders, symlinks and hard links are made from
// the manifest; anything else in the archive is dropped and counted.
// The engine reads the box's tree as root: the manifest, written by the
// watcher after the agent died, is what makes that safe.

// CopyStageDir is where copy-in trees land in the box before the
// watcher verifies and moves them (relative to the box's /). It lives
// in the box's own file system and goes with the box.
const CopyStageDir = ".deathwatch-copy-in"

// CopyFrames are the four frame types of one direction.
type CopyFrames struct{ Entry, Data, Sum, End FrameType }

var (
	CopyInFrames  = CopyFrames{FrameCopyInEntry, FrameCopyInData, FrameCopyInSum, FrameCopyInEnd}
	CopyOutFrames = CopyFrames{FrameCopyOutEntry, FrameCopyOutData, FrameCopyOutSum, FrameCopyOutEnd}
)

// Has reports whether t is one of f's frame types.
func (f CopyFrames) Has(t FrameType) bool {
	return t == f.Entry || t == f.Data || t == f.Sum || t == f.End
}

// CopyChunk is the most file data one copy-data frame carries.
const CopyChunk = 256 << 10

// MaxCopyPath bounds an entry's path and a link's target.
const MaxCopyPath = 4096

// CopyKind is what an entry is.
type CopyKind uint8

const (
	CopyDir      CopyKind = 1
	CopyFile     CopyKind = 2
	CopySymlink  CopyKind = 3
	CopyHardlink CopyKind = 4 // Link names an earlier file of the same tree
)

func (k CopyKind) String() string {
	switch k {
	case CopyDir:
		return "dir"
	case CopyFile:
		return "file"
	case CopySymlink:
		return "symlink"
	case CopyHardlink:
		return "hardlink"
	}
	return "kind" + itoa(int(k))
}

// CopyModeMask is the part of a mode a copy keeps: permissions and the
// sticky bit. Set-user-ID and set-group-ID are dropped both ways.
const CopyModeMask = 0o1777

// CopyEntry is one object of a tree.
type CopyEntry struct {
	Root uint32   // index into the spec's CopyIn or CopyOut
	Path string   // relative to the root, slash-separated, clean; "" is the root itself
	Kind CopyKind //
	Mode uint32   // CopyModeMask bits (dirs and files)
	Size int64    // files: the length in bytes
	Link string   // symlink: its target; hardlink: the earlier path
}

func (c CopyEntry) Marshal() []byte {
	var e enc
	e.u64(uint64(c.Root))
	e.str(c.Path)
	e.u64(uint64(c.Kind))
	e.u64(uint64(c.Mode))
	e.u64(uint64(c.Size))
	e.str(c.Link)
	return e.b
}

// ParseCopyEntry decodes and checks an entry: a clean relative path, a
// known kind, a mode within CopyModeMask, a size only on a file, a
// link only on a link (a hard link's a clean relative path).
func ParseCopyEntry(b []byte) (CopyEntry, error) {
	d := dec{b: b, what: "copy-entry"}
	c := CopyEntry{Root: d.u32("root"), Path: d.str("path")}
	kind, mode, size := d.u64("kind"), d.u64("mode"), d.u64("size")
	c.Link = d.str("link")
	if d.err == nil {
		c.Kind, c.Mode, c.Size = CopyKind(kind), uint32(mode), int64(size)
		switch {
		case c.Path != "" && !CleanRelPath(c.Path):
			d.fail("path", strconv.Quote(c.Path)+" is not a clean relative path inside the tree")
		case kind < uint64(CopyDir) || kind > uint64(CopyHardlink):
			d.fail("kind", "unknown kind "+utoa(kind))
		case mode&^CopyModeMask != 0:
			d.fail("mode", "bits outside "+strconv.FormatUint(CopyModeMask, 8))
		case size > 1<<62 || (size != 0 && c.Kind != CopyFile):
			d.fail("size", "not a file's size")
		case (c.Kind == CopySymlink) != (c.Link != "") && c.Kind != CopyHardlink:
			d.fail("link", "a symlink needs a target, nothing else has one")
		case c.Kind == CopySymlink && (len(c.Link) > MaxCopyPath || strings.IndexByte(c.Link, 0) >= 0):
			d.fail("link", "not a symlink target")
		case c.Kind == CopyHardlink && (!CleanRelPath(c.Link) || c.Path == ""):
			d.fail("link", "a hard link names an earlier path of the tree")
		}
	}
	return c, d.done()
}

// CleanRelPath reports whether p is a clean, relative, slash-separated
// path that stays inside its root: no "", ".", ".." component, no
// leading or doubled slash, no NUL.
func CleanRelPath(p string) bool {
	if p == "" || len(p) > MaxCopyPath || strings.IndexByte(p, 0) >= 0 {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return false
		}
	}
	return true
}

// CopyData is a copy-data payload: bytes at an offset of the current file.
type CopyData struct {
	Offset int64
	Bytes  []byte
}

// AppendCopyData encodes a copy-data payload onto dst.
func AppendCopyData(dst []byte, off int64, data []byte) []byte {
	var e enc
	e.b = dst
	e.u64(uint64(off))
	return append(e.b, data...)
}

func ParseCopyData(b []byte) (CopyData, error) {
	d := dec{b: b, what: "copy-data"}
	off := d.u64("offset")
	if d.err == nil && (off > 1<<62 || len(d.b) == 0 || len(d.b) > CopyChunk) {
		d.fail("bytes", "want 1-"+itoa(CopyChunk)+" bytes at an offset below 2^62")
	}
	if d.err != nil {
		return CopyData{}, d.err
	}
	return CopyData{Offset: int64(off), Bytes: d.b}, nil
}

// ParseCopySum checks a copy-sum payload: a SHA-256 digest.
func ParseCopySum(b []byte) ([]byte, error) {
	if len(b) != sha256Size {
		return nil, &ProtocolError{Reason: "copy-sum: " + itoa(len(b)) + " bytes (want " + itoa(sha256Size) + ")"}
	}
	return b, nil
}

// CopyEnd closes one root's tree.
type CopyEnd struct {
	Root     uint32
	Files    int64  // regular files (hard links not counted)
	Bytes    int64  // their total size
	Manifest []byte // SHA-256 of the manifest text; empty with Err
	Err      string // the sender refuses this root (copy-out only)
}

func (c CopyEnd) Marshal() []byte {
	var e enc
	e.u64(uint64(c.Root))
	e.u64(uint64(c.Files))
	e.u64(uint64(c.Bytes))
	e.str(string(c.Manifest))
	e.str(c.Err)
	return e.b
}

func ParseCopyEnd(b []byte) (CopyEnd, error) {
	d := dec{b: b, what: "copy-end"}
	c := CopyEnd{Root: d.u32("root"), Files: int64(d.u64("files")), Bytes: int64(d.u64("bytes"))}
	c.Manifest = []byte(d.str("manifest"))
	c.Err = d.str("error")
	if d.err == nil && c.Err == "" && len(c.Manifest) != sha256Size {
		d.fail("manifest", "not a SHA-256 digest")
	}
	return c, d.done()
}

// ManifestLine is one entry's line of the manifest: kind, mode (octal),
// size, SHA-256 (files; "-" otherwise), the quoted path ("." for the
// root) and, for a link, " -> " and its quoted target.
func ManifestLine(c CopyEntry, sum []byte) string {
	digest := "-"
	if c.Kind == CopyFile {
		digest = hex.EncodeToString(sum)
	}
	p := c.Path
	if p == "" {
		p = "."
	}
	line := c.Kind.String() + " " + strconv.FormatUint(uint64(c.Mode), 8) + " " + strconv.FormatInt(c.Size, 10) + " " + digest + " " + strconv.Quote(p)
	if c.Link != "" {
		line += " -> " + strconv.Quote(c.Link)
	}
	return line + "\n"
}

// VerifyError is a copy that arrived but is not what was sent: a
// file's digest, the manifest's, or the counts differ.
type VerifyError struct{ Reason string }

func (e *VerifyError) Error() string { return "verify: " + e.Reason }

// CopyRefusedError is a root the sender or the receiver refuses whole:
// over its limit, unreadable, or a target it must not write.
type CopyRefusedError struct{ Reason string }

func (e *CopyRefusedError) Error() string { return e.Reason }

// SymlinkStaysInside reports whether a symlink at path p (relative to
// its tree's root) with target t resolves inside the tree without
// following any other link upwards: t is relative, its ".." components
// all lead it, and there are no more of them than p has parents. A link
// that is the root itself never stays inside. Each link's own target
// starts from a real folder of the tree, so by induction no chain of
// links that each pass this escapes either.
func SymlinkStaysInside(p, t string) bool {
	if p == "" || t == "" || strings.HasPrefix(t, "/") || strings.IndexByte(t, 0) >= 0 {
		return false
	}
	depth := strings.Count(p, "/")
	ups, rest := 0, false
	for _, c := range strings.Split(t, "/") {
		switch {
		case c == "" || c == ".":
		case c == "..":
			if rest {
				return false
			}
			ups++
		default:
			rest = true
		}
	}
	return ups <= depth
}

// FormatSize says a byte count for a person: 1536 → "1.5 KiB".
func FormatSize(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " bytes"
	}
	f, i := float64(n)/1024, 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[i:i+1] + "iB"
}

// MaxCopyRoots bounds a spec's CopyIn and CopyOut.
const MaxCopyRoots = 64

func (s *Spec) hasCopies() bool {
	return len(s.CopyIn) > 0 || len(s.CopyOut) > 0 || s.CopyOutLimit != 0 || s.CopyOutMaxEntries != 0 || s.CopyOutArchive
}

func (s *Spec) checkCopies() error {
	for _, f := range []struct {
		name  string
		paths []string
	}{{"copy_in", s.CopyIn}, {"copy_out", s.CopyOut}} {
		if len(f.paths) > MaxCopyRoots {
			return errors.New("spec: " + f.name + ": " + itoa(len(f.paths)) + " paths exceed the limit of " + itoa(MaxCopyRoots))
		}
		for i, p := range f.paths {
			if err := checkPath(p); err != "" {
				return errors.New("spec: " + f.name + "[" + itoa(i) + "]: " + err)
			}
			if p == "/" {
				return errors.New("spec: " + f.name + "[" + itoa(i) + "]: a copy of / itself; name a folder or file below it")
			}
		}
	}
	if s.CopyOutLimit < 0 || s.CopyOutLimit > 1<<62 {
		return errors.New("spec: copy_out_limit: out of range")
	}
	if s.CopyOutMaxEntries < 0 || s.CopyOutMaxEntries > 1<<40 {
		return errors.New("spec: copy_out_max_entries: out of range")
	}
	if s.CopyOutArchive && len(s.CopyOut) == 0 {
		return errors.New("spec: copy_out_archive: no copy_out to read")
	}
	return nil
}
