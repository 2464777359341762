// Package journal is the durable record of a supervisor instance's
// launches: one JSON file per launch, written before anything of its box
// exists and closed once the box is gone. Closed entries move to a
// folder of their own, so that reading the open ones costs what they
// are, and are pruned after DefaultRetention. The lifecycle writes it;
// reconcile, ls and demo read it (and reconcile closes what it proves
// gone).
package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/proc"
	"deathwatch/supervisor/trusted"
)

// Journal states, in lifecycle order. An entry is open until it reaches
// StateRemoved; reconcile looks at open entries only.
const (
	StateIntent   = "intent"   // journaled before anything exists
	StateCreated  = "created"  // the box exists
	StateStarted  = "started"  // the box runs
	StateRemoving = "removing" // removal intent journaled
	StateRemoved  = "removed"  // the box is gone (closed)
)

// Owner identifies the supervisor process that owns a box. A pid alone
// is not proof: pids are reused, so the start time (clock ticks since
// boot, /proc/PID/stat field 22) and the boot id go with it.
type Owner struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"` // clock ticks since boot
	BootID    string `json:"boot_id"`
	// PIDNS is the inode of the owner's PID namespace: its pid means
	// something only to a reader in the same namespace.
	PIDNS uint64 `json:"pid_ns,omitempty"`
}

// ControllerRecord is the owner's controller: the link the owner
// watches (controller.Link*) and, where known, the controller's process
// (PID 0: a descriptor's other end, not known). Detached, nothing is
// watched and the record names the process that started the owner:
// reconcile ends an owner whose controller is proven gone.
type ControllerRecord struct {
	Link string `json:"link"`
	Owner
}

// Exit is how the agent ended, as the watcher reported it.
type Exit struct {
	Code   int    `json:"code"`
	Reason string `json:"reason"`
}

// Entry is one launch. It never holds the agent's environment.
type Entry struct {
	LaunchID string            `json:"launch_id"`
	Instance string            `json:"instance"`
	RunKey   string            `json:"run_key,omitempty"`
	Box      string            `json:"box"`
	Runtime  string            `json:"runtime"`
	Image    string            `json:"image,omitempty"`
	Nonce    string            `json:"nonce"`
	Labels   map[string]string `json:"labels"`
	Owner    Owner             `json:"owner"`
	// Controller is the process that started the owner and whose death
	// it watches (nil: none, a library caller is its own controller).
	Controller *ControllerRecord `json:"controller,omitempty"`
	State      string            `json:"state"`
	// RuntimeState is what the runtime recorded for itself (Box.State),
	// e.g. the native runtime's cgroup path.
	RuntimeState map[string]string `json:"runtime_state,omitempty"`
	Exit         *Exit             `json:"exit,omitempty"`
	Error        string            `json:"error,omitempty"` // the last failure, e.g. a removal that did not succeed
	Created      time.Time         `json:"created"`
	Updated      time.Time         `json:"updated"`
}

// Open reports whether the entry still stands for a box that may exist.
func (e *Entry) Open() bool { return e.State != StateRemoved }

// Journal is the durable record of one instance's launches: one JSON
// file per launch in DIR/INSTANCE/, each written temp → fsync → rename,
// so a kill (or a power loss) at any instant leaves either the old or
// the new entry, never a torn one. Only the first write of an entry
// (StateIntent) also fsyncs the folder, and a Volatile runtime's entry
// is not synced at all: see Put.
type Journal struct {
	dir string
	// volatile reports whether nothing of a box of the runtime it names
	// outlives the host's power (supervisor.CapVolatile); nil: none.
	volatile func(runtime string) bool
	// retention is the age past which closing writes prune closed
	// entries (see pruneIfDue).
	retention time.Duration
}

// ValidName reports whether s can be an instance name, a name prefix or
// a launch id: it becomes a file name and a container name. It is
// ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$, spelled out: compiling that
// regexp (128 copies of the class) would cost every process start of
// the binary, the native box's init stage included.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// DefaultDir is /var/lib/deathwatch for root, else
// $XDG_STATE_HOME/deathwatch (~/.local/state/deathwatch). It is "" when
// neither XDG_STATE_HOME nor HOME is set: there is no shared fallback
// (a folder in /tmp that another user made first would be theirs), and
// Open asks for --journal.
func DefaultDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/deathwatch"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "deathwatch")
	}
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "deathwatch")
	}
	return ""
}

// maxEntrySize bounds one journal entry (a few KB in practice).
const maxEntrySize = 1 << 20

// Open opens (creating) the journal of instance under dir. The
// journal is acted on (boxes removed, pids killed, cgroups emptied), so
// it is refused unless the folder and every one above it are the
// supervisor's own or root's and nobody else can write them
// (trusted.CheckDir). volatile names the runtimes whose entries are not synced (see Put):
// the lifecycle and reconcile pass supervisor.Volatile; nil syncs every
// entry.
func Open(dir, instance string, volatile func(runtime string) bool) (*Journal, error) {
	if !ValidName(instance) {
		return nil, exitcode.Usage("instance %q: use letters, digits, '_', '.', '-' (at most 128)", instance)
	}
	if dir == "" {
		return nil, exitcode.Usage("no journal folder: neither HOME nor XDG_STATE_HOME is set; pass --journal DIR (a folder of this user's that nobody else can write)")
	}
	d := filepath.Join(dir, instance)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, fmt.Errorf("create journal directory: %w", err)
	}
	if err := trusted.CheckDir(d); err != nil {
		return nil, exitcode.Refused("journal not trusted: %w", err)
	}
	return &Journal{dir: d, volatile: volatile, retention: DefaultRetention}, nil
}

// Dir is the instance's journal directory.
func (j *Journal) Dir() string { return j.dir }

func (j *Journal) path(launchID string) string { return filepath.Join(j.dir, launchID+".json") }

// Put writes e, stamping Updated. A SIGKILL alone needs no fsync (the
// page cache outlives the process); against a power loss:
//
//   - The entry's data is synced on every write but the closing one (see
//     writeFileAtomic): the file holds the old entry or the new one,
//     never a torn one. A closing write (removed) comes after its box is
//     gone, and reconcile closes whatever a power loss leaves of it. It is written
//     into the closed folder, and the open entry then removed (closeEntry).
//   - The entry's name is synced on the intent only (the folder): the
//     entry is on disk before the box exists, or a box that an engine
//     keeps over a reboot has no entry to prove it ours. A later rename
//     a power loss drops leaves the previous state, as a SIGKILL before
//     that write does (the crash matrix covers each point).
//
// A Volatile runtime's entry is not synced at all (isVolatile).
func (j *Journal) Put(e *Entry) error {
	if !ValidName(e.LaunchID) {
		return fmt.Errorf("journal: bad launch id %q", e.LaunchID)
	}
	e.Updated = time.Now().UTC()
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("journal %s: %w", e.LaunchID, err)
	}
	if e.State == StateRemoved {
		if err := j.closeEntry(e, append(b, '\n')); err != nil {
			return fmt.Errorf("journal %s (%s): %w", e.LaunchID, e.State, err)
		}
		return nil
	}
	durable := !j.isVolatile(e.Runtime)
	if err := writeFileAtomic(j.path(e.LaunchID), append(b, '\n'), durable, durable && e.State == StateIntent); err != nil {
		return fmt.Errorf("journal %s (%s): %w", e.LaunchID, e.State, err)
	}
	return nil
}

// StagedEntry is an entry written (and, for a runtime that is not
// Volatile, synced) under a temporary name in the journal's folder: it
// is no entry yet (List ignores it) until Commit names it.
type StagedEntry struct {
	tmp, path string
	durable   bool
}

// Stage is the slow half of Put for an intent: the entry's data written
// and synced under a temporary name, which can run beside the engine's
// probe. Commit makes it the entry; Drop removes it (a launch refused
// before anything was created journals nothing).
func (j *Journal) Stage(e *Entry) (*StagedEntry, error) {
	if !ValidName(e.LaunchID) {
		return nil, fmt.Errorf("journal: bad launch id %q", e.LaunchID)
	}
	e.Updated = time.Now().UTC()
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", e.LaunchID, err)
	}
	s := &StagedEntry{path: j.path(e.LaunchID), durable: !j.isVolatile(e.Runtime)}
	if s.tmp, err = writeTemp(s.path, append(b, '\n'), s.durable); err != nil {
		return nil, fmt.Errorf("journal %s (%s): %w", e.LaunchID, e.State, err)
	}
	return s, nil
}

// Commit names the staged entry and makes the name durable: once it
// returns, reconcile finds the entry after a SIGKILL or a power loss.
func (s *StagedEntry) Commit() error {
	if err := trusted.ReplaceFile(s.tmp, s.path); err != nil {
		os.Remove(s.tmp)
		return fmt.Errorf("journal %s: %w", filepath.Base(s.path), err)
	}
	if !s.durable {
		return nil
	}
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		return fmt.Errorf("journal %s: %w", filepath.Base(s.path), err)
	}
	return nil
}

// Drop removes the staged entry.
func (s *StagedEntry) Drop() { os.Remove(s.tmp) }

// writeTemp writes data to a new temporary file beside p (a name List
// ignores), synced when sync asks, and returns its path.
func writeTemp(p string, data []byte, sync bool) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil && sync {
		err = fsync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// isVolatile reports whether runtime's entries need no fsync. Such a
// box (native) is kernel state and records in /run, and nothing its
// launch writes outside the journal outlives a reboot: a power loss
// ends all of it, so its entry needs to outlive the supervisor only,
// which a plain write and rename do. Reconcile closes any state of it a
// power loss leaves, an empty (or NUL-filled) one as a LostEntryError.
func (j *Journal) isVolatile(runtime string) bool {
	return j.volatile != nil && j.volatile(runtime)
}

// Get reads one entry.
func (j *Journal) Get(launchID string) (*Entry, error) {
	if !ValidName(launchID) {
		return nil, fmt.Errorf("journal: bad launch id %q", launchID)
	}
	e, err := readEntry(j.path(launchID))
	if errors.Is(err, fs.ErrNotExist) {
		return readEntry(j.closedPath(launchID))
	}
	return e, err
}

// List returns every entry, open and closed, oldest first. Leftover
// temp files from a write that was killed are ignored; an entry that
// does not parse is returned in bad (a *LostEntryError when a power
// loss explains it) rather than failing the lot.
func (j *Journal) List() (entries []*Entry, bad []error, err error) {
	closed, cbad, err := readEntries(filepath.Join(j.dir, closedDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	open, bad, err := j.ListOpen()
	if err != nil {
		return nil, nil, err
	}
	entries = append(open, closed...)
	sort.Slice(entries, func(a, b int) bool { return entries[a].Created.Before(entries[b].Created) })
	return entries, append(bad, cbad...), nil
}

// ListOpen returns the open entries, oldest first, as List does, and
// reads none of the closed ones. An open entry beside a closed one of
// the same launch is what a kill inside the closing write leaves: it
// is removed, the close finished. A closed entry in the open folder
// (a journal written before closed entries had their own) is moved to
// the closed folder.
func (j *Journal) ListOpen() (entries []*Entry, bad []error, err error) {
	all, bad, err := readEntries(j.dir)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range all {
		_, cerr := os.Lstat(j.closedPath(e.LaunchID))
		switch {
		case cerr == nil:
			os.Remove(j.path(e.LaunchID))
		case !e.Open():
			if trusted.EnsureDir(filepath.Join(j.dir, closedDir)) == nil {
				os.Rename(j.path(e.LaunchID), j.closedPath(e.LaunchID))
			}
		default:
			entries = append(entries, e)
		}
	}
	sort.Slice(entries, func(a, b int) bool { return entries[a].Created.Before(entries[b].Created) })
	return entries, bad, nil
}

// readEntries reads the entries of one folder of the journal.
func readEntries(dir string) (entries []*Entry, bad []error, err error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read journal: %w", err)
	}
	boot := proc.BootTime()
	for _, de := range des {
		n := de.Name()
		if !strings.HasSuffix(n, ".json") || strings.HasPrefix(n, ".") {
			continue
		}
		p := filepath.Join(dir, n)
		e, err := readEntry(p)
		if err != nil {
			if lostToPower(p, boot) {
				err = &LostEntryError{Path: p, LaunchID: strings.TrimSuffix(n, ".json")}
			}
			bad = append(bad, err)
			continue
		}
		entries = append(entries, e)
	}
	return entries, bad, nil
}

// LostEntryError is an entry a power loss emptied: one written without
// fsync (see Put) whose data never reached the disk — a Volatile
// runtime's (its box ended with the power), or a closing write (its box
// was gone before it). Reconcile closes it.
type LostEntryError struct {
	Path     string
	LaunchID string
}

func (e *LostEntryError) Error() string {
	return fmt.Sprintf("journal entry %s is empty and was written before this boot: an entry that is not synced (a box of a runtime that does not outlive a power loss, or a closing write after the box was gone)", e.Path)
}

// lostToPower reports whether the entry at p is what a power loss
// leaves of an entry written without fsync: a regular file, at most a
// maximal entry long, holding nothing but NUL bytes, last written
// before this boot (boot zero: not known, never).
func lostToPower(p string, boot time.Time) bool {
	if boot.IsZero() {
		return false
	}
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || !fi.ModTime().Before(boot) {
		return false
	}
	b, err := trusted.ReadFile(p, maxEntrySize)
	if err != nil {
		return false
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func readEntry(p string) (*Entry, error) {
	b, err := trusted.ReadFile(p, maxEntrySize)
	if err != nil {
		return nil, fmt.Errorf("read journal entry: %w", err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("parse journal entry %s: %w", p, err)
	}
	return &e, nil
}

// writeFileAtomic writes temp → rename (trusted.ReplaceFile: an exchange and an
// unlink where an entry is replaced), syncing the data when syncData
// asks, and the folder when syncName asks that the name itself be
// durable (see Put). Data synced without the name is synced before the
// rename: the entry it replaces stays whole until the new one is. Data
// synced with its name (the intent: an entry that stands for no box
// yet) is synced after the rename, then the folder: on ext4 the data's
// fsync commits the rename with it, and the folder's has little left to
// do. A power loss
// before both returned leaves no entry, the old one, or an empty one
// (a LostEntryError, which reconcile closes): the box is created only
// after both.
func writeFileAtomic(p string, data []byte, syncData, syncName bool) error {
	dir := filepath.Dir(p)
	f, err := os.CreateTemp(dir, "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if syncData && !syncName {
		if err := fsync(f); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := trusted.ReplaceFile(tmp, p); err != nil {
		return err
	}
	ok = true
	if !syncName {
		return nil
	}
	if syncData {
		// Opened again by its name (Windows renames no open file); the
		// fsync syncs the file, whichever descriptor asks.
		g, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		err = fsync(g)
		if cerr := g.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return syncDir(dir)
}

// fsync is (*os.File).Sync; a test counts the calls.
var fsync = (*os.File).Sync

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := fsync(d); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
