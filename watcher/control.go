package watcher

import (
	"errors"
	"io"
	"os"
	"path"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"deathwatch/shared"
	"deathwatch/shared/seccomp"
	"golang.org/x/sys/unix"
)

// openControl opens the stream, reads hello and spec, and returns the
// validated spec, or nil and the status to exit with.
func (w *watcher) openControl() (*shared.Spec, int) {
	var in io.Reader
	var out io.Writer
	until := time.Now().Add(w.cfg.SpecTimeout)
	switch w.cfg.Control {
	case "stdin":
		in, out = pollable(0, "control-in"), pollable(1, "control-out")
	case "unix":
		fd, peer, err := acceptControl(w.cfg.ControlPath, until)
		if err != nil {
			return nil, w.lostBeforeStart(err)
		}
		relayPID.Store(int32(peer))
		w.conn, w.eof = fd, make(chan struct{})
		f := pollable(fd, "control")
		in, out = f, f
	default:
		if _, err := unix.FcntlInt(uintptr(w.cfg.ControlFD), unix.F_GETFD, 0); err != nil {
			logf("--control=fd:" + itoa(w.cfg.ControlFD) + ": no such descriptor")
			return nil, shared.ExitUsage
		}
		syscall.CloseOnExec(w.cfg.ControlFD)
		f := pollable(w.cfg.ControlFD, "control")
		in, out = f, f
	}
	w.out = shared.NewWriter(out)
	w.frames = make(chan frameEvent, 16)
	w.pongs = make(chan []byte, 4)
	go w.readFrames(in)
	go w.sendPongs()

	hello, err := w.expect(shared.FrameHello, until)
	if err != nil {
		return nil, w.lostBeforeStart(err)
	}
	h, err := shared.ParseHello(hello)
	if err == nil && h.Version != shared.ProtocolVersion {
		err = &shared.ProtocolError{Reason: "hello: protocol version " + itoa(int(h.Version)) + ", this watcher speaks " + itoa(shared.ProtocolVersion)}
	}
	if err == nil && w.cfg.Nonce != "" && h.Nonce != w.cfg.Nonce {
		err = &shared.ProtocolError{Reason: "hello: not this box's nonce"}
	}
	if err != nil {
		return nil, w.lostBeforeStart(err)
	}
	payload, err := w.expect(shared.FrameSpec, until)
	if err != nil {
		return nil, w.lostBeforeStart(err)
	}
	w.spec, err = shared.ParseSpec(payload)
	if err != nil {
		return nil, w.lostBeforeStart(err)
	}
	spec := &w.spec
	err = validateSpec(spec, w.cfg.WatcherUser)
	if err != nil {
		var root *shared.RootRefusedError
		var refused *shared.RefusedError
		if errors.As(err, &root) || errors.As(err, &refused) {
			return nil, w.setupFailed(shared.ExitRefused, err.Error())
		}
		return nil, w.setupFailed(shared.ExitUsage, err.Error())
	}
	if spec.LiveFIFO != "" {
		live, err := openLive(spec.LiveFIFO, h.Nonce)
		if err != nil {
			return nil, w.lostBeforeStart(err)
		}
		go w.watchLive(live)
	}
	if w.cfg.LiveFD > 0 {
		live, err := inheritedLive(w.cfg.LiveFD)
		if err != nil {
			return nil, w.lostBeforeStart(err)
		}
		go w.watchLive(live)
	}
	if len(spec.CopyIn) > 0 || len(spec.CopyOut) > 0 {
		// A copy reads, writes and hashes whole trees (seconds for
		// GiBs) beside the loop that answers the host's pings: such a
		// box gets back the Ps the watcher gives up (watcher/oneproc),
		// so that copies use every CPU.
		runtime.SetDefaultGOMAXPROCS()
	}
	if code := w.copyIn(spec); code != 0 {
		return nil, code
	}
	return spec, 0
}

// validateSpec checks the spec on a goroutine of its own, whose stack
// goes back to the runtime's cache when it is done: the checks run deep
// below the watcher's start, and on the main goroutine they could
// overflow its stack, which the runtime then doubles for good (and a
// larger stack takes a span of its own). So the main goroutine stays
// at the smallest size, the frame reader's, in the same span.
func validateSpec(spec *shared.Spec, self ID) error {
	done := make(chan error, 1)
	go func() {
		err := spec.Validate()
		if err == nil {
			err = spec.CheckWatcherID(self.UID, self.GID)
		}
		done <- err
	}()
	return <-done
}

// pollable opens fd for the runtime's poller, so that a read or a write
// that waits holds no thread: under a pids limit the agent may leave
// the watcher no room for one more.
func pollable(fd int, name string) *os.File {
	_ = syscall.SetNonblock(fd, true)
	return os.NewFile(uintptr(fd), name)
}

// expect waits for the next frame, which must be of type t and come
// before until.
func (w *watcher) expect(t shared.FrameType, until time.Time) ([]byte, error) {
	timer := newAlarm(time.Until(until))
	defer timer.Stop()
	for {
		var ev frameEvent
		var ok bool
		select {
		case ev, ok = <-w.frames:
		case <-timer.C:
			return nil, errors.New("no " + t.String() + " frame from the host within --spec-timeout " + w.cfg.SpecTimeout.String() + " of the watcher's start")
		}
		switch {
		case !ok:
			return nil, io.EOF
		case ev.err != nil:
			return nil, ev.err
		case ev.f.Type == shared.FramePing:
			w.pong(ev.f.Payload)
		case ev.f.Type != t:
			return nil, &shared.ProtocolError{Reason: "expected a " + t.String() + " frame, got " + ev.f.Type.String()}
		default:
			return ev.f.Payload, nil
		}
	}
}

func (w *watcher) lostBeforeStart(err error) int {
	msg := streamError(err)
	logf("liveness lost before the agent started: " + msg)
	rec := shared.Exit{Reason: shared.ReasonLivenessLost, Code: shared.ExitLivenessLost, Message: msg}
	if w.out != nil {
		waitTimeout(func() { _ = w.out.Send(shared.FrameExit, rec.Marshal()) }, time.Second)
		w.closeWrite(time.Second)
	}
	return shared.ExitLivenessLost
}

func streamError(err error) string {
	if errors.Is(err, io.EOF) {
		return "the control stream reached EOF"
	}
	return err.Error()
}

// controlAgent prepares the agent of a spec: links, stdio, identity.
func (w *watcher) controlAgent(spec *shared.Spec) (*agent, int) {
	for _, l := range spec.Links {
		if err := makeLink(l); err != nil {
			return nil, w.setupFailed(shared.ExitSetupFailed, err.Error())
		}
	}
	files, err := w.agentStdio(spec)
	if err != nil {
		return nil, w.setupFailed(shared.ExitSetupFailed, err.Error())
	}

	dir := spec.Workdir
	if dir == "" {
		dir = "/"
	}
	if !isDir(dir) {
		return nil, w.setupFailed(shared.ExitSetupFailed, "spec: workdir: "+dir+" is not a directory in the box")
	}
	var filter []seccomp.Insn
	if len(spec.Seccomp) > 0 {
		if filter, err = seccomp.Unmarshal(spec.Seccomp); err != nil {
			return nil, w.setupFailed(shared.ExitUsage, "spec: seccomp: "+err.Error())
		}
	}
	if w.cfg.Restricted {
		var refused *refusedError
		if err := checkRestricted(spec); errors.As(err, &refused) {
			return nil, w.setupFailed(shared.ExitRefused, err.Error())
		} else if err != nil {
			return nil, w.setupFailed(shared.ExitSetupFailed, err.Error())
		}
	}
	plan, warn, err := planLandlock(spec.Writable, spec.RequireLandlock || w.cfg.Restricted)
	var refused *refusedError
	switch {
	case errors.As(err, &refused):
		return nil, w.setupFailed(shared.ExitRefused, err.Error())
	case err != nil:
		return nil, w.setupFailed(shared.ExitSetupFailed, err.Error())
	case warn != "":
		logf(warn)
	}
	w.oom = newOOMCounter()
	a := &agent{
		Argv:     spec.Argv,
		Env:      spec.Env,
		Dir:      dir,
		Files:    []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()},
		Cred:     &syscall.Credential{Uid: spec.UID, Gid: spec.GID},
		DropCaps: true,
		// A session of its own: nothing the agent does reaches the
		// watcher's (not even the SIGCONT a session member may send);
		// with a tty, the pty is that session's terminal.
		Setsid:      true,
		Setctty:     spec.TTY,
		NewKeyring:  true,
		Landlock:    plan,
		Filter:      filter,
		OOMScore:    agentOOMScore,
		CgroupTasks: w.cfg.AgentCgroupFD,
	}
	a.LeaveCgroup = w.cfg.WatcherCgroupFD
	if w.cfg.Restricted {
		a.Cred, a.DropCaps = nil, false
		a.SameUID, a.PidWall = true, seccomp.PidWall()
	}
	return a, 0
}

// closeChildEnds drops the watcher's copies of the agent's stdio, so
// that the output pipes reach EOF when the box's last writer dies, and
// the descriptors of its Landlock rules.
func (w *watcher) closeChildEnds(a *agent) {
	a.Landlock.close()
	for _, f := range w.childEnds {
		f.Close()
	}
	w.childEnds = nil
}

// startRelay relays the agent's output (and its input, with stdin or a
// tty) once ready is on its way, so that ready comes first.
func (w *watcher) startRelay() {
	for i, t := range []shared.FrameType{shared.FrameStdout, shared.FrameStderr}[:len(w.outputs)] {
		w.relay.Add(1)
		go w.relayOutput(w.outputs[i], t)
	}
	if w.stdin != nil {
		go w.stdin.run()
	}
}

// pong answers a ping without ever blocking the loop: a host that does
// not read its stream must not stop the deadline or the heartbeat. When
// the host is that far behind, the pong is dropped.
func (w *watcher) pong(seq []byte) {
	select {
	case w.pongs <- seq:
	default:
	}
}

func (w *watcher) sendPongs() {
	for seq := range w.pongs {
		_ = w.out.Send(shared.FramePong, seq)
	}
}

func (w *watcher) relayOutput(r *os.File, t shared.FrameType) {
	defer w.relay.Done()
	defer r.Close()
	buf := chunkBuffer()
	// In the unix control mode the watcher's own stdout and stderr are
	// the box's log: it gets the agent's output as text too.
	var log *os.File
	if w.cfg.Control == "unix" {
		log = os.Stdout
		if t == shared.FrameStderr {
			log = os.Stderr
		}
	}
	for {
		n, err := r.Read(buf)
		if n > 0 && log != nil {
			_, _ = log.Write(buf[:n])
		}
		if n > 0 {
			if w.out.Send(t, buf[:n]) != nil {
				// The host is gone; keep draining so writers never block.
				continue
			}
			w.relayed.Add(1)
		}
		// A pty's master reads EIO once no process holds the slave,
		// after everything written to it was read.
		if err != nil {
			return
		}
	}
}

// chunkBuffer is a relay's buffer: an anonymous mapping of its own,
// held as long as the relay (the box's life). Its pages stay untouched,
// so not resident, until the agent's output arrives. Not a make of a
// constant size, which the compiler puts on the goroutine's stack: a
// 32 KiB frame, zeroed, on a stack grown to 64 KiB for it, per relay.
// Not the heap either: a heap object is zeroed when its pages were used
// before, and the pages the tainted spawning thread frees as it exits,
// just before the relays start, are the first the heap hands out, so a
// relay's buffer would be resident in whole in an idle box.
func chunkBuffer() []byte {
	p, err := unix.MmapPtr(-1, 0, nil, shared.MaxChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, shared.MaxChunk)
	}
	return unsafe.Slice((*byte)(p), shared.MaxChunk)
}

// waitOutput waits until the agent's output has all been sent: as long
// as it keeps going out, and up to a second more after the last frame
// went (a host that stopped reading must not hold the box open).
func (w *watcher) waitOutput() {
	done := make(chan struct{})
	go func() { w.relay.Wait(); close(done) }()
	tick := newAlarm(time.Second)
	defer tick.Stop()
	for last := w.relayed.Load(); ; {
		select {
		case <-done:
			return
		case <-tick.C:
			n := w.relayed.Load()
			if n == last {
				return
			}
			last = n
			tick.Reset(time.Second)
		}
	}
}

// handleFrame obeys one frame from the host while the agent runs.
func (w *watcher) handleFrame(ev frameEvent) {
	if ev.err != nil {
		w.lost(streamError(ev.err))
		return
	}
	f := ev.f
	var err error
	switch f.Type {
	case shared.FramePing:
		if _, err = shared.ParseSeq(f.Payload); err == nil {
			w.pong(f.Payload)
		}
	case shared.FrameSignal:
		var s shared.Signal
		if s, err = shared.ParseSignal(f.Payload); err == nil && !w.mainDone {
			_ = syscall.Kill(w.mainPid, syscall.Signal(s.Number))
		}
	case shared.FrameStop:
		var s shared.Stop
		if s, err = shared.ParseStop(f.Payload); err == nil {
			w.beginEnd(shared.ReasonStopped, -1, s.Grace)
		}
	case shared.FrameStdin:
		err = w.input(f.Payload)
	case shared.FrameStdinEOF:
		err = w.inputEOF(f.Payload)
	case shared.FrameResize:
		// Without a pty a window size means nothing: accepted, ignored.
		var r shared.Resize
		if r, err = shared.ParseResize(f.Payload); err == nil && w.pty != nil {
			_ = setWinsize(w.pty, r)
		}
	default:
		err = &shared.ProtocolError{Reason: "unexpected " + f.Type.String() + " frame while the agent runs"}
	}
	if err != nil {
		w.lost(err.Error())
	}
}

// makeLink makes l.Target a symlink to l.Source (a mount bridge).
func makeLink(l shared.Link) error {
	if cur, err := os.Readlink(l.Target); err == nil && cur == l.Source {
		return nil
	}
	if err := mkdirAll(path.Dir(l.Target)); err != nil {
		return errors.New("link " + l.Target + ": " + err.Error())
	}
	if err := os.Symlink(l.Source, l.Target); err != nil {
		return errors.New("link " + l.Target + " -> " + l.Source + ": " + err.Error())
	}
	return nil
}

func closeRangeCloexec(first uint) error {
	return unix.CloseRange(first, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}

// isDir reports whether p is a folder (symlinks followed).
func isDir(p string) bool {
	var st syscall.Stat_t
	return syscall.Stat(p, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR
}

// mkdirAll is os.MkdirAll(dir, 0o755).
func mkdirAll(dir string) error {
	if isDir(dir) {
		return nil
	}
	if parent := path.Dir(dir); parent != dir {
		if err := mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := syscall.Mkdir(dir, 0o755); err != nil && !(err == syscall.EEXIST && isDir(dir)) {
		return &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	return nil
}
