package shared

import (
	"errors"
	"path"
	"strconv"
	"strings"
	"time"

	"deathwatch/shared/seccomp"
)

// Defaults for a spec that leaves them unset.
const (
	DefaultAgentUID   = 1000
	DefaultAgentGID   = 1000
	DefaultWatcherUID = 65533
	DefaultWatcherGID = 65533
)

// Limits on a spec, well below MaxPayload so that an error names the
// field rather than the frame.
const (
	MaxArgs      = 4096
	MaxEnv       = 4096
	MaxLinks     = 256
	MaxWritable  = 256
	MaxStringLen = 128 << 10
	// MaxDuration bounds the deadline, the grace and the heartbeat, so
	// that their sum (a supervisor waits for deadline + grace + a
	// margin) can never overflow into an instant kill.
	MaxDuration = 10 * 365 * 24 * time.Hour
)

// Link is a mount bridge: the watcher makes Target a symlink to Source
// before the agent starts (a runtime that passes a workspace through at
// its host path, like sbx, exposes it at the path the agent expects).
type Link struct {
	Target string // absolute path inside the box to create
	Source string // absolute path it points at
}

// Spec is what the supervisor asks the watcher to run. It is the only
// carrier of the agent's environment, which may hold secrets: it never
// appears in an argv, a label, the journal or a log.
type Spec struct {
	Argv      []string
	Env       []string // "NAME=value"
	Workdir   string   // absolute; empty means /
	UID, GID  uint32   // the agent's identity
	AllowRoot bool     // accept UID 0 for the agent
	Deadline  time.Duration
	Grace     time.Duration
	Heartbeat time.Duration // silence longer than this is a liveness loss; 0 disables
	Links     []Link
	// TTY runs the agent on a pseudo-terminal the watcher allocates in
	// the box (fds 0-2, its controlling terminal), Rows x Cols at the
	// start (0 leaves the size unset); stdin frames are its input.
	TTY  bool
	Rows uint16
	Cols uint16

	// AllowUserns lets the agent make nested user namespaces: the
	// filter below was compiled with seccomp.Options.AllowUserns.
	AllowUserns bool
	// Seccomp is the agent's syscall filter, a classic BPF program as
	// seccomp.Marshal encodes it (compiled by the supervisor; the
	// watcher installs it right before the agent's exec). Empty means
	// no filter: a spec from a supervisor that predates the field.
	Seccomp []byte

	// Stdin gives the agent a pipe for its stdin fed by stdin frames,
	// under the credit of stdin.go; without it (and without TTY) the
	// agent's stdin is /dev/null. With TTY it changes nothing: a pty
	// always takes input.
	Stdin bool

	// CopyIn are the box paths the copy-in trees land at, in the order
	// their copy frames come (root i is CopyIn[i]); CopyOut the box
	// paths sent back after the agent, up to CopyOutLimit bytes each
	// (0: none). See copy.go.
	CopyIn       []string
	CopyOut      []string
	CopyOutLimit int64
	// CopyOutMaxEntries bounds the entries (folders, files, links) of
	// each copy-out tree (0: none).
	CopyOutMaxEntries int64
	// CopyOutArchive: the host reads the copy-out trees by the
	// runtime's archive; the watcher sends their manifests only, then
	// waits for copy-out-fetched (copy.go).
	CopyOutArchive bool

	// LiveFIFO is the box path of the supervisor's liveness FIFO
	// (livefifo.go), or "" for none: a second, earlier alarm beside
	// the control stream, which stays the contract.
	LiveFIFO string

	// Writable are the box paths the agent may write in (a folder: its
	// whole tree; a file: that file), enforced by the agent's Landlock
	// domain; every other path of the box refuses the agent's writes.
	// Empty: no write limits (a writable root, or a spec from a
	// supervisor that predates the field). See watcher/landlock.go.
	Writable []string
	// RequireLandlock refuses (ExitRefused) to start the agent on a
	// kernel that cannot give it the whole Landlock layer (write limits
	// and scopes, landlock.ScopeABI); without it such a kernel loses
	// that layer, said in one line.
	RequireLandlock bool
}

// Validate names the first bad field.
func (s *Spec) Validate() error {
	for _, check := range specChecks {
		if err := check(s); err != nil {
			return err
		}
	}
	return s.Fits()
}

// specChecks are Validate's steps, in the order of the spec's fields.
var specChecks = [...]func(*Spec) error{
	(*Spec).checkArgv,
	(*Spec).checkEnv,
	(*Spec).checkWorkdir,
	(*Spec).checkIdentity,
	(*Spec).checkDurations,
	(*Spec).checkLinks,
	(*Spec).checkFilter,
	(*Spec).checkWindow,
	(*Spec).checkCopies,
	(*Spec).checkLiveFIFO,
	(*Spec).checkWritable,
}

// badField is a malformed spec, named by its field.
func badField(field, why string) error { return errors.New("spec: " + field + ": " + why) }

// nth names element i of a list field.
func nth(field string, i int) string { return field + "[" + itoa(i) + "]" }

func (s *Spec) checkArgv() error {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return badField("argv", "empty: name a command to run")
	}
	if len(s.Argv) > MaxArgs {
		return badField("argv", itoa(len(s.Argv))+" arguments exceed the limit of "+itoa(MaxArgs))
	}
	for i, a := range s.Argv {
		if err := checkString(a); err != "" {
			return badField(nth("argv", i), err)
		}
	}
	return nil
}

func (s *Spec) checkEnv() error {
	if len(s.Env) > MaxEnv {
		return badField("env", itoa(len(s.Env))+" variables exceed the limit of "+itoa(MaxEnv))
	}
	for i, kv := range s.Env {
		name, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return badField(nth("env", i), "not NAME=value")
		case name == "":
			return badField(nth("env", i), "empty name")
		}
		if err := checkString(kv); err != "" {
			return badField("env "+name, err)
		}
	}
	return nil
}

func (s *Spec) checkWorkdir() error {
	if s.Workdir != "" {
		if err := checkPath(s.Workdir); err != "" {
			return badField("workdir", err)
		}
	}
	return nil
}

// checkIdentity refuses ids the agent must not run as: (uid_t)-1, which
// setresuid reads as "leave unchanged" (the agent would keep the
// watcher's identity), root without AllowRoot, and the watcher's own.
func (s *Spec) checkIdentity() error {
	if s.UID == noID {
		return badField("uid", "4294967295 is not an id ((uid_t)-1 means \"unchanged\" to the kernel)")
	}
	if s.GID == noID {
		return badField("gid", "4294967295 is not an id ((gid_t)-1 means \"unchanged\" to the kernel)")
	}
	if s.UID == 0 && !s.AllowRoot {
		return &RootRefusedError{Field: "uid"}
	}
	if s.GID == 0 && !s.AllowRoot {
		return &RootRefusedError{Field: "gid"}
	}
	return s.CheckWatcherID(DefaultWatcherUID, DefaultWatcherGID)
}

func (s *Spec) checkDurations() error {
	for _, f := range [...]struct {
		name string
		d    time.Duration
	}{{"deadline", s.Deadline}, {"grace", s.Grace}, {"heartbeat", s.Heartbeat}} {
		if f.d < 0 {
			return badField(f.name, "negative duration "+f.d.String())
		}
		if f.d > MaxDuration {
			return badField(f.name, f.d.String()+" exceeds the limit of "+MaxDuration.String()+" (ten years)")
		}
	}
	return nil
}

func (s *Spec) checkLinks() error {
	if len(s.Links) > MaxLinks {
		return badField("links", itoa(len(s.Links))+" links exceed the limit of "+itoa(MaxLinks))
	}
	for i, l := range s.Links {
		if err := checkPath(l.Target); err != "" {
			return badField(nth("links", i)+".target", err)
		}
		if l.Target == "/" {
			return badField(nth("links", i)+".target", "cannot replace /")
		}
		if err := checkPath(l.Source); err != "" {
			return badField(nth("links", i)+".source", err)
		}
	}
	return nil
}

func (s *Spec) checkFilter() error {
	if len(s.Seccomp) > 0 {
		if err := seccomp.Check(s.Seccomp); err != nil {
			return badField("seccomp", err.Error())
		}
	}
	return nil
}

func (s *Spec) checkWindow() error {
	if !s.TTY && (s.Rows != 0 || s.Cols != 0) {
		return badField("rows/cols", "a window size without tty; set tty or leave them 0")
	}
	return nil
}

func (s *Spec) checkLiveFIFO() error {
	if s.LiveFIFO != "" {
		if err := checkPath(s.LiveFIFO); err != "" {
			return badField("live_fifo", err)
		}
	}
	return nil
}

func (s *Spec) checkWritable() error {
	if len(s.Writable) > MaxWritable {
		return badField("writable", itoa(len(s.Writable))+" paths exceed the limit of "+itoa(MaxWritable))
	}
	for i, p := range s.Writable {
		if err := checkPath(p); err != "" {
			return badField(nth("writable", i), err)
		}
	}
	return nil
}

// noID is (uid_t)-1.
const noID = 1<<32 - 1

// Fits reports whether the spec fits in one frame. A larger one could
// never be sent: the supervisor must refuse it before anything starts.
func (s *Spec) Fits() error {
	if n := len(s.Marshal()); n > MaxPayload {
		return errors.New("spec: size: " + itoa(n) + " bytes (argv, environment, filter) exceed the " + itoa(MaxPayload) + "-byte limit of one frame; pass less in the environment")
	}
	return nil
}

// CheckWatcherID refuses an agent that would share the watcher's uid
// or gid: it could signal, ptrace or prlimit PID 1.
func (s *Spec) CheckWatcherID(uid, gid uint32) error {
	if s.UID == uid {
		return &RefusedError{Field: "uid", Why: itoa(int(uid)) + " is the watcher's own uid; pick another UID"}
	}
	if s.GID == gid {
		return &RefusedError{Field: "gid", Why: itoa(int(gid)) + " is the watcher's own gid; pick another GID"}
	}
	return nil
}

// RefusedError is a spec the watcher refuses to run (shared.ExitRefused)
// for a reason other than root.
type RefusedError struct{ Field, Why string }

func (e *RefusedError) Error() string { return "spec: " + e.Field + ": " + e.Why }

// RootRefusedError is a spec that would run the agent as root without
// AllowRoot: a refusal (shared.ExitRefused), not a malformed spec.
type RootRefusedError struct{ Field string }

func (e *RootRefusedError) Error() string {
	return "spec: " + e.Field + ": 0 (root) is refused for the agent; allow it explicitly or pick another " + e.Field
}

func checkString(s string) string {
	if len(s) > MaxStringLen {
		return itoa(len(s)) + " bytes exceed the limit of " + itoa(MaxStringLen)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "contains a NUL byte"
	}
	return ""
}

func checkPath(p string) string {
	if e := checkString(p); e != "" {
		return e
	}
	if !path.IsAbs(p) {
		return strconv.Quote(p) + " is not an absolute path"
	}
	if path.Clean(p) != p {
		return strconv.Quote(p) + " is not clean (want " + strconv.Quote(path.Clean(p)) + ")"
	}
	return ""
}

func (s Spec) Marshal() []byte {
	var e enc
	e.strs(s.Argv)
	e.strs(s.Env)
	e.str(s.Workdir)
	e.u64(uint64(s.UID))
	e.u64(uint64(s.GID))
	e.boolean(s.AllowRoot)
	e.i64(int64(s.Deadline))
	e.i64(int64(s.Grace))
	e.i64(int64(s.Heartbeat))
	e.u64(uint64(len(s.Links)))
	for _, l := range s.Links {
		e.str(l.Target)
		e.str(l.Source)
	}
	e.boolean(s.TTY)
	e.u64(uint64(s.Rows))
	e.u64(uint64(s.Cols))
	// Fields added later come in groups, each written only when it or a
	// later one is set, so that a spec without them is byte for byte
	// what an older supervisor sent (and one encoding per spec holds: the
	// last group present is never all zero).
	walls := len(s.Writable) > 0 || s.RequireLandlock
	live := s.LiveFIFO != "" || walls
	if s.AllowUserns || len(s.Seccomp) > 0 || s.Stdin || s.hasCopies() || live {
		e.boolean(s.AllowUserns)
		e.str(string(s.Seccomp))
	}
	if s.Stdin || s.hasCopies() || live {
		e.boolean(s.Stdin)
	}
	if s.hasCopies() || live {
		e.strs(s.CopyIn)
		e.strs(s.CopyOut)
		e.u64(uint64(s.CopyOutLimit))
	}
	if s.CopyOutMaxEntries != 0 || s.CopyOutArchive || live {
		e.u64(uint64(s.CopyOutMaxEntries))
	}
	if s.CopyOutArchive || live {
		e.boolean(s.CopyOutArchive)
	}
	if live {
		e.str(s.LiveFIFO)
	}
	if walls {
		e.strs(s.Writable)
		e.boolean(s.RequireLandlock)
	}
	return e.b
}

// ParseSpec decodes a spec frame's payload. It checks the encoding, not
// the contents: call Validate for that.
func ParseSpec(b []byte) (Spec, error) {
	d := dec{b: b, what: "spec"}
	var s Spec
	s.Argv = d.strs("argv")
	s.Env = d.strs("env")
	s.Workdir = d.str("workdir")
	s.UID = d.u32("uid")
	s.GID = d.u32("gid")
	s.AllowRoot = d.boolean("allow_root")
	s.Deadline = time.Duration(d.i64("deadline"))
	s.Grace = time.Duration(d.i64("grace"))
	s.Heartbeat = time.Duration(d.i64("heartbeat"))
	n := d.u64("links")
	if d.err == nil && n > uint64(len(d.b))/2 {
		d.fail("links", "count "+utoa(n)+" exceeds the bytes left")
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		s.Links = append(s.Links, Link{Target: d.str("links.target"), Source: d.str("links.source")})
	}
	s.TTY = d.boolean("tty")
	rows, cols := d.u64("rows"), d.u64("cols")
	if d.err == nil && (rows > 0xffff || cols > 0xffff) {
		d.fail("rows/cols", "out of range")
	}
	s.Rows, s.Cols = uint16(rows), uint16(cols)
	// An older supervisor's spec ends here: no filter.
	if d.err == nil && len(d.b) > 0 {
		s.AllowUserns = d.boolean("allow_userns")
		if f := d.str("seccomp"); f != "" {
			s.Seccomp = []byte(f)
		}
		if d.err == nil && len(d.b) == 0 && !s.AllowUserns && len(s.Seccomp) == 0 {
			d.fail("allow_userns/seccomp", "present but empty (non-canonical)")
		}
	}
	// ... or here: no stdin relay.
	if d.err == nil && len(d.b) > 0 {
		s.Stdin = d.boolean("stdin")
		if d.err == nil && !s.Stdin && len(d.b) == 0 {
			d.fail("stdin", "present but false (non-canonical)")
		}
	}
	// ... or here: no copies.
	if d.err == nil && len(d.b) > 0 {
		s.CopyIn, s.CopyOut = d.strs("copy_in"), d.strs("copy_out")
		if len(s.CopyIn) == 0 && len(s.CopyOut) == 0 {
			s.CopyIn, s.CopyOut = nil, nil // a later group's filler
		}
		s.CopyOutLimit = int64(d.u64("copy_out_limit"))
		if d.err == nil && !s.hasCopies() && len(d.b) == 0 {
			d.fail("copy_in/copy_out", "present but empty (non-canonical)")
		}
	}
	// ... or here: no entry limit.
	if d.err == nil && len(d.b) > 0 {
		s.CopyOutMaxEntries = int64(d.u64("copy_out_max_entries"))
		if d.err == nil && s.CopyOutMaxEntries == 0 && len(d.b) == 0 {
			d.fail("copy_out_max_entries", "present but 0 (non-canonical)")
		}
	}
	// ... or here: copy-out in frames.
	if d.err == nil && len(d.b) > 0 {
		s.CopyOutArchive = d.boolean("copy_out_archive")
		if d.err == nil && !s.CopyOutArchive && len(d.b) == 0 {
			d.fail("copy_out_archive", "present but false (non-canonical)")
		}
	}
	// ... or here: no live FIFO.
	if d.err == nil && len(d.b) > 0 {
		s.LiveFIFO = d.str("live_fifo")
		if d.err == nil && s.LiveFIFO == "" && len(d.b) == 0 {
			d.fail("live_fifo", "present but empty (non-canonical)")
		}
	}
	// ... or here: no write limits.
	if d.err == nil && len(d.b) > 0 {
		if s.Writable = d.strs("writable"); len(s.Writable) == 0 {
			s.Writable = nil
		}
		s.RequireLandlock = d.boolean("require_landlock")
		if d.err == nil && len(s.Writable) == 0 && !s.RequireLandlock {
			d.fail("writable/require_landlock", "present but empty (non-canonical)")
		}
	}
	return s, d.done()
}
