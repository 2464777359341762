// Package copy is copy-in and copy-out (shared/copy.go), the host's
// side, as a party of the control stream (supervisor.Party): trees
// travel on the stream, so a copy creates nothing beside the box: no
// volume, no staging object, nothing for reconcile to clean.
package copy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

func init() {
	// The supervisor is not size-bound: the hardware SHA-256 it is.
	shared.NewSHA256 = sha256.New
}

// CopyIn is --copy-in HOST:BOX: the file or tree at Host (followed if
// a symlink: the operator named it) lands at Box before the agent runs.
type CopyIn struct{ Host, Box string }

// CopyOut is --copy-out BOX:HOSTDIR: after the agent, the file or tree
// at Box comes back as HOSTDIR/base(Box), its manifest beside it as
// HOSTDIR/base(Box).manifest.
type CopyOut struct{ Box, HostDir string }

// Result is where the copy lands on the host.
func (c CopyOut) Result() string { return filepath.Join(c.HostDir, path.Base(c.Box)) }

// Manifest is where its manifest is written.
func (c CopyOut) Manifest() string { return c.Result() + ".manifest" }

// DefaultCopyOutLimit bounds each copy-out tree when --copy-out-limit
// is not given.
const DefaultCopyOutLimit = 1 << 30

// Options are the copies of one launch.
type Options struct {
	In  []CopyIn
	Out []CopyOut
	// OutLimit bounds each copy-out tree's bytes (0: DefaultCopyOutLimit).
	OutLimit int64
	// OutMaxEntries bounds the entries of each copy-out tree (0:
	// DefaultCopyOutMaxEntries).
	OutMaxEntries int64
}

// New is the party that carries o's copies (supervisor.Party); a launch
// without copies has one all the same: it refuses copy frames the box
// was not asked for. Options may change until the launch begins.
func New(o Options) *Copies {
	return &Copies{Options: o, inDone: make(chan struct{})}
}

// Check refuses bad copies before anything exists: a missing host
// source, a result that would overwrite something already there.
func (c *Copies) Check() error {
	o := c.Options
	seen := map[string]bool{}
	for _, c := range o.In {
		if _, err := os.Stat(c.Host); err != nil {
			return exitcode.With(shared.ExitCopyFailed, fmt.Errorf("--copy-in %s:%s: refused: %w", c.Host, c.Box, err))
		}
	}
	for _, c := range o.Out {
		if fi, err := os.Stat(c.HostDir); err != nil || !fi.IsDir() {
			return exitcode.Usage("--copy-out %s:%s: %s is not a folder; make it first", c.Box, c.HostDir, c.HostDir)
		}
		for _, p := range []string{c.Result(), c.Manifest()} {
			if _, err := os.Lstat(p); err == nil || seen[p] {
				return exitcode.Usage("--copy-out %s:%s: %s exists already; copy-out never overwrites: move it away or pick another folder", c.Box, c.HostDir, p)
			}
			seen[p] = true
		}
	}
	if len(o.In)+len(o.Out) > 0 && !copySupported {
		return exitcode.Usage("--copy-in and --copy-out need Linux on the supervisor's side (openat2)")
	}
	return nil
}

// Spec asks the watcher for the copies.
func (c *Copies) Spec(s *shared.Spec) {
	s.CopyIn = copyInTargets(c.Options.In)
	s.CopyOut = copyOutSources(c.Options.Out)
	s.CopyOutLimit = c.Options.outLimit()
	s.CopyOutMaxEntries = c.Options.outMaxEntries()
	c.limit, c.maxEntries = s.CopyOutLimit, s.CopyOutMaxEntries
}

// Created decides how the copies travel: by the runtime's archive
// where it can, else in frames.
func (c *Copies) Created(ctx context.Context, l *supervisor.PartyLaunch, s *shared.Spec) {
	c.l = l
	c.archiveIn = c.canStageArchive(ctx)
	c.archiveOutput = c.archiveOut(ctx)
	s.CopyOutArchive = c.archiveOutput
}

// Sent starts the copy-in beside the pings: a long copy-in must not
// silence them.
func (c *Copies) Sent(ctx context.Context, w *shared.Writer) {
	c.ctx, c.w = ctx, w
	if len(c.Options.In) == 0 {
		return
	}
	go func() {
		if err := c.sendIn(w); err != nil {
			// A tree the host cannot read is said here (the box ends
			// with copy-refused); a broken stream by the outcome.
			c.l.Log.Debug("copy-in", "err", err)
			if refused := (*shared.CopyRefusedError)(nil); errors.As(err, &refused) {
				c.l.Say("copy-in: %v", err)
			}
		}
	}()
}

// Ready says the copy-in staged.
func (c *Copies) Ready() {
	if len(c.Options.In) > 0 {
		c.staged()
	}
}

// Frame takes the copy-out frames.
func (c *Copies) Frame(f shared.Frame) (bool, error) {
	switch f.Type {
	case shared.FrameCopyOutEntry, shared.FrameCopyOutData, shared.FrameCopyOutSum, shared.FrameCopyOutEnd:
	default:
		return false, nil
	}
	if len(c.Options.Out) == 0 {
		return true, &shared.ProtocolError{Reason: f.Type.String() + " from a box asked for no copy-out"}
	}
	return true, c.frame(f)
}

// Busy reports whether a copy frame went or came within d.
func (c *Copies) Busy(d time.Duration) bool {
	last := c.last.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < d
}

// End fails a launch whose copy-out failed; one cut short by the
// stream's end leaves nothing behind either. (Not when the agent never
// started: a setup or copy-in failure keeps its own reason.)
func (c *Copies) End(exited bool) *supervisor.Verdict {
	if len(c.Options.Out) == 0 {
		return nil
	}
	if err := c.outErr(exited); err != nil && exited {
		return copyVerdict(err)
	}
	return nil
}

// Copies is one launch's copy state, shared by the lifecycle's
// goroutines.
type Copies struct {
	Options
	l          *supervisor.PartyLaunch
	ctx        context.Context // ends with the control stream (an archive put's)
	limit      int64           // the spec's copy-out bounds
	maxEntries int64
	// archiveIn: the runtime puts the copy-in into the box (once it
	// runs, beside the watcher: sendIn); archive is what it put.
	// archiveOutput: the copy-out comes by the runtime's archive.
	archiveIn     bool
	archive       *archived
	archiveOutput bool

	mu        sync.Mutex
	inFiles   int64
	inBytes   int64
	inStart   time.Time
	inSent    time.Duration
	inDone    chan struct{} // closed when sendIn returns (its counts are final)
	transport string
	out       map[uint32]*exportTree
	outDone   int
	err       error // the first copy-out failure: the launch fails with it
	removeMu  sync.Once
	last      atomic.Int64 // unix nanoseconds of the last copy frame sent or received

	// An archive copy-out (Spec.CopyOutArchive): the watcher's
	// manifests, the fetch under way, and the stream to tell the
	// watcher it is done (copy_archive_out_linux.go).
	w            *shared.Writer
	manifests    map[uint32]*manifestTree
	more         *sync.Cond // on mu: a manifest frame came, or the copy failed
	fetchStarted bool
	fetchStopped bool
	fetching     sync.WaitGroup
	cancelFetch  context.CancelFunc
}

// moved notes a copy frame sent or received.
func (c *Copies) moved() { c.last.Store(time.Now().UnixNano()) }

type exportTree struct {
	c     CopyOut
	recv  *shared.CopyReceiver
	start time.Time
	root  int // the HOSTDIR descriptor (-1: closed)
}

// staged is the event for copy-in, once the agent started: the watcher
// verified every tree before it started the agent.
func (c *Copies) staged() {
	// The watcher verified after the last copy-end, which sendIn sent
	// before it returns: its counts are in then. (A box that says ready
	// without its copy-in is not waited for long: the counts are only
	// the event's.)
	select {
	case <-c.inDone:
	case <-time.After(time.Second):
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.l.Emit(supervisor.Event{Event: supervisor.EventStaged, Transport: c.transport, Files: c.inFiles, Bytes: c.inBytes, Seconds: time.Since(c.inStart).Seconds()})
}

// outErr is the copy-out failure, or one for trees that never came.
func (c *Copies) outErr(exited bool) error {
	// An archive fetch still under way (the stream ended first) is
	// stopped: it fails, and nothing is kept.
	c.stopFetch()
	c.fetching.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && exited && c.outDone < len(c.Options.Out) {
		c.err = &shared.CopyRefusedError{Reason: fmt.Sprintf("the box sent %d of %d copy-out trees", c.outDone, len(c.Options.Out))}
	}
	if c.err != nil {
		c.removeResults()
	}
	return c.err
}

// fail records the first copy-out failure and stops taking frames.
func (c *Copies) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failLocked(err)
}

func (c *Copies) failLocked(err error) {
	c.refuseLocked(err)
	c.removeResults()
}

// refuseLocked records the first copy-out failure (c.mu held); the
// results are removed by whoever writes them (an archive fetch's
// goroutine, as it stops) or once the stream ended (outErr).
func (c *Copies) refuseLocked(err error) {
	if c.more != nil {
		c.more.Broadcast()
	}
	if c.err == nil {
		c.err = err
	}
}

// removeResults removes every copy-out result of the launch: a copy
// that failed keeps nothing, not even the trees that verified (c.mu held).
func (c *Copies) removeResults() {
	c.removeMu.Do(func() {
		for _, t := range c.out {
			t.close()
		}
		for _, co := range c.Options.Out {
			// RemoveAll never follows a symlink below its argument.
			os.RemoveAll(co.Result())
			os.Remove(co.Manifest())
		}
	})
}

// copyVerdict is the verdict on a launch whose copy failed.
func copyVerdict(err error) *supervisor.Verdict {
	reason := shared.ReasonCopyRefused
	var verify *shared.VerifyError
	if errors.As(err, &verify) {
		reason = shared.ReasonVerifyFailed
	}
	msg := strings.TrimPrefix(err.Error(), "verify: ")
	return &supervisor.Verdict{Code: shared.ExitCopyFailed, Reason: reason,
		Say: fmt.Sprintf("copy-out %s: %s; nothing of the copy-out was kept", reason, msg)}
}

func copyInTargets(cs []CopyIn) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Box)
	}
	return out
}

func copyOutSources(cs []CopyOut) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Box)
	}
	return out
}

// DefaultCopyOutMaxEntries bounds the entries of each copy-out tree
// when --copy-out-max-entries is not given. While a tree arrives the
// host keeps each entry's path (seen) and manifest line: 194 bytes per
// entry of a 40-byte path (TestReceiverMemoryPerEntry), some 185 MiB
// for a million; a longer path adds about twice its length.
const DefaultCopyOutMaxEntries = 1_000_000

func (o Options) outMaxEntries() int64 {
	return o.outBound(o.OutMaxEntries, DefaultCopyOutMaxEntries)
}

func (o Options) outLimit() int64 {
	return o.outBound(o.OutLimit, DefaultCopyOutLimit)
}

// outBound is a copy-out bound as given, or its default; none without
// a copy-out.
func (o Options) outBound(given, def int64) int64 {
	switch {
	case len(o.Out) == 0:
		return 0
	case given > 0:
		return given
	}
	return def
}
