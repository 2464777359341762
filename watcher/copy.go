package watcher

import (
	"errors"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"deathwatch/shared"
	"golang.org/x/sys/unix"
)

// Copy-in and copy-out (shared/copy.go). The watcher writes copy-in
// trees as root, before the agent exists, beneath the box's / with
// openat2 (nothing in the image can redirect a write), and gives every
// object it made to the agent's uid:gid. It sends copy-out trees after
// every process of the box is dead, so export reads files and never
// runs the agent's code; it reads them by descriptor without following
// a symlink, and the host decides what to keep.

// copyIn receives the spec's copy-in trees. It returns 0, or the status
// to exit with (the agent never starts).
func (w *watcher) copyIn(spec *shared.Spec) int {
	w.copySpec = spec
	if len(spec.CopyIn) == 0 {
		return 0
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return w.setupFailed(shared.ExitSetupFailed, "copy-in: open /: "+err.Error())
	}
	defer unix.Close(root)
	c := newCopyIn(root, spec)
	defer c.r.Close()
	// What landed and was not moved (a tree written through the
	// receiver, one that failed) goes before the agent starts.
	defer shared.RemoveAll("/" + shared.CopyStageDir)
	c.hashAhead()
	defer c.stopAhead()
	return w.receiveCopyIn(c, spec.Heartbeat)
}

// receiveCopyIn reads frames until every tree is received or verified,
// answering pings; silence past the heartbeat is a liveness loss.
func (w *watcher) receiveCopyIn(c *copyInRun, heartbeat time.Duration) int {
	var hb *alarm
	var hbC <-chan struct{}
	if heartbeat > 0 {
		hb = newAlarm(heartbeat)
		defer hb.Stop()
		hbC = hb.C
	}
	for c.left > 0 {
		var ev frameEvent
		select {
		case ev = <-w.frames:
		case v := <-c.verified:
			if err := c.verifiedOne(v); err != nil {
				return w.copyFailed("copy-in", err)
			}
			continue
		case <-hbC:
			return w.lostBeforeStart(errors.New("no frame from the host for " + heartbeat.String() + " during copy-in (heartbeat timeout)"))
		}
		if hb != nil {
			hb.Reset(heartbeat)
		}
		if ev.err != nil {
			return w.lostBeforeStart(ev.err)
		}
		if ev.f.Type == shared.FramePing {
			w.pong(ev.f.Payload)
			continue
		}
		c.stopAhead()
		if err := c.frame(ev.f); err != nil {
			return w.copyFailed("copy-in", err)
		}
	}
	return 0
}

// copyInRun is one copy-in under way. A tree comes either in copy frames,
// written through the receiver, or put by the host's archive and
// announced by copy-in-landed. A landed tree is verified off the frame
// loop (a large tree takes seconds), one at a time, in the order its
// copy-in-landed came: the loop goes on reading frames, so the host's
// pings keep the heartbeat alive and a silent host is still noticed.
type copyInRun struct {
	root int // the box's /
	r    *shared.CopyReceiver

	done []bool // roots received, or landed and claimed
	left int    // roots not yet received or verified

	queue     []shared.CopyEnd // landed trees waiting for the verifier
	verifying bool             // the receiver is the verifier's
	verified  chan verdict

	ahead, aheadDone chan struct{} // the hashing ahead, nil once stopped
}

// verdict is a landed tree's verification.
type verdict struct {
	root uint32
	err  error
}

func newCopyIn(root int, spec *shared.Spec) *copyInRun {
	r := &shared.CopyReceiver{Root: root, Chown: true, UID: int(spec.UID), GID: int(spec.GID)}
	for _, p := range spec.CopyIn {
		r.Bases = append(r.Bases, strings.TrimPrefix(p, "/"))
	}
	return &copyInRun{root: root, r: r, done: make([]bool, len(spec.CopyIn)), left: len(spec.CopyIn), verified: make(chan verdict, 1)}
}

// hashAhead hashes the complete files of the host's archive put while it
// lands (the box runs meanwhile). It stops at the first copy frame,
// before anything is verified or moved: the verification reads the
// digests, and again what changed since.
func (c *copyInRun) hashAhead() {
	c.r.Landing = &shared.LandingSums{}
	c.ahead, c.aheadDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.aheadDone)
		c.r.Landing.Run(c.ahead, c.root, shared.CopyStageDir, len(c.done))
	}()
}

func (c *copyInRun) stopAhead() {
	if c.ahead != nil {
		close(c.ahead)
		<-c.aheadDone
		c.ahead = nil
	}
}

// verifyNext starts verifying the next landed tree, unless one is under way.
func (c *copyInRun) verifyNext() {
	if c.verifying || len(c.queue) == 0 {
		return
	}
	e := c.queue[0]
	c.queue, c.verifying = c.queue[1:], true
	go func() { c.verified <- verdict{e.Root, landed(c.root, c.r, e)} }()
}

// verifiedOne counts a verified tree and starts the next.
func (c *copyInRun) verifiedOne(v verdict) error {
	c.verifying = false
	if v.err != nil {
		return v.err
	}
	c.left--
	c.verifyNext()
	return nil
}

// frame takes one frame of the host's other than a ping. Anything but a
// copy-in frame is a protocol error, as is a copy frame while a landed
// tree is verified.
func (c *copyInRun) frame(f shared.Frame) error {
	var end bool
	var i uint32
	var err error
	switch {
	case f.Type == shared.FrameCopyInLanded:
		var e shared.CopyEnd
		if e, err = shared.ParseCopyEnd(f.Payload); err == nil {
			if int(e.Root) < len(c.done) && !c.done[e.Root] {
				// Claimed now; counted when verified.
				c.done[e.Root] = true
				c.queue = append(c.queue, e)
				c.verifyNext()
				return nil
			}
			end, i = true, e.Root
		}
	case c.verifying || len(c.queue) > 0:
		err = &shared.ProtocolError{Reason: "copy-in: " + f.Type.String() + " while a landed tree is verified"}
	case shared.CopyInFrames.Has(f.Type):
		end, i, err = c.r.Frame(shared.CopyInFrames, f)
	default:
		return &shared.ProtocolError{Reason: "expected a copy-in frame, got " + f.Type.String()}
	}
	if err == nil && end && (int(i) >= len(c.done) || c.done[i]) {
		err = &shared.ProtocolError{Reason: "copy-in: root " + itoa(int(i)) + " sent twice, or not asked for"}
	}
	if err != nil {
		return err
	}
	if end {
		c.done[i] = true
		c.left--
	}
	return nil
}

// landed verifies and moves a copy-in tree the host put at
// CopyStageDir/root (shared.CopyReceiver.Landed).
func landed(root int, r *shared.CopyReceiver, e shared.CopyEnd) error {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(root, shared.CopyStageDir, how)
	if err != nil {
		return &shared.VerifyError{Reason: "/" + shared.CopyStageDir + ": " + err.Error() + " (nothing landed, or not a folder)"}
	}
	defer unix.Close(fd)
	return r.Landed(e.Root, fd, itoa(int(e.Root)), e)
}

// copyFailed ends a box whose copy-in failed: a malformed frame is a
// protocol error (liveness lost, as any), a mismatch or a refusal has
// its own reason.
func (w *watcher) copyFailed(what string, err error) int {
	var verify *shared.VerifyError
	var refused *shared.CopyRefusedError
	switch {
	case shared.IsProtocolError(err):
		return w.lostBeforeStart(err)
	case errors.As(err, &verify):
		return w.failedBeforeStart(shared.ReasonVerifyFailed, shared.ExitCopyFailed, what+": "+err.Error())
	case errors.As(err, &refused):
		return w.failedBeforeStart(shared.ReasonCopyRefused, shared.ExitCopyFailed, what+": refused: "+err.Error())
	}
	return w.setupFailed(shared.ExitSetupFailed, what+": "+err.Error())
}

// exportCaps are the capabilities the watcher keeps permitted (never
// effective while the agent lives) to read the agent's files for
// copy-out: DAC_OVERRIDE and DAC_READ_SEARCH, those of them it holds.
func (w *watcher) exportCaps() uint32 {
	if w.copySpec == nil || len(w.copySpec.CopyOut) == 0 {
		return 0
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0
	}
	return data[0].Permitted & (1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH)
}

// raiseExportCaps makes the kept capabilities effective, on every
// thread (credentials are per thread): the agent is dead by now.
func raiseExportCaps() {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return
	}
	data[0].Effective = data[0].Permitted
	// Best effort: without them, what the watcher's uid can read goes.
	_, _, _ = syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
}

// copyOut sends the spec's copy-out trees once the box is empty (with
// CopyOutArchive their manifests, shared/copy.go). It
// answers pings meanwhile, and gives up when the host is gone (EOF, a
// broken stream, silence past the heartbeat): the watcher then exits
// and the box with it.
func (w *watcher) copyOut() {
	spec := w.copySpec
	if w.out == nil || spec == nil || len(spec.CopyOut) == 0 {
		return
	}
	raiseExportCaps()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		w.sendTrees(spec)
	}()
	var hbC <-chan struct{}
	var hb *alarm
	if spec.Heartbeat > 0 {
		hb = newAlarm(spec.Heartbeat)
		defer hb.Stop()
		hbC = hb.C
	}
	// An archive copy-out: the host reads the trees once it has their
	// manifests, from the box the engine removes when the watcher exits;
	// so the watcher waits for its copy-out-fetched (or its end).
	fetched := !spec.CopyOutArchive
	for {
		select {
		case <-sent:
			if fetched {
				return
			}
			sent = nil
		case <-hbC:
			logf("copy-out: no frame from the host for " + spec.Heartbeat.String() + "; giving up")
			return
		case ev := <-w.frames:
			if ev.err != nil {
				logf("copy-out: " + streamError(ev.err) + "; giving up")
				return
			}
			if hb != nil {
				hb.Reset(spec.Heartbeat)
			}
			switch ev.f.Type {
			case shared.FramePing:
				w.pong(ev.f.Payload)
			case shared.FrameCopyOutFetched:
				fetched = true
				if sent == nil {
					return
				}
			}
			// Anything else (a stop, a signal) has nothing left to act on.
		}
	}
}

func (w *watcher) sendTrees(spec *shared.Spec) {
	s := &shared.CopySender{
		Frames: shared.CopyOutFrames, Send: w.out.Send, Limit: spec.CopyOutLimit, MaxEntries: spec.CopyOutMaxEntries,
		ManifestOnly: spec.CopyOutArchive,
		Skipped: func(p string, mode uint32) {
			logf("copy-out: " + p + ": not a folder, file or symlink, or a file neither the agent's nor readable by all (mode " + strconv.FormatUint(uint64(mode), 8) + "); not sent")
		},
		// The watcher reads with DAC_OVERRIDE: a file the agent could
		// not read itself (a root-only file of the box it hard-linked
		// into the tree, where fs.protected_hardlinks is off) stays.
		Allow: func(uid, mode uint32) bool { return uid == spec.UID || mode&0o004 != 0 },
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		logf("copy-out: open /: " + err.Error())
		return
	}
	defer unix.Close(root)
	for i, p := range spec.CopyOut {
		dir, name := p[:strings.LastIndexByte(p, '/')], p[strings.LastIndexByte(p, '/')+1:]
		if dir == "" {
			dir = "/"
		}
		how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		pfd, err := unix.Openat2(root, dir, how)
		if err != nil {
			end := shared.CopyEnd{Root: uint32(i), Err: p + ": " + dir + ": " + err.Error() + " (missing, or a symlink on the way)"}
			if w.out.Send(shared.FrameCopyOutEnd, end.Marshal()) != nil {
				return
			}
			continue
		}
		err = s.SendTree(uint32(i), pfd, name)
		unix.Close(pfd)
		var refused *shared.CopyRefusedError
		if err != nil && !errors.As(err, &refused) {
			return // the stream is gone
		}
	}
}
