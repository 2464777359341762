package watcher

import (
	"bufio"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"deathwatch/shared"
)

type watcher struct {
	cfg  *Config
	sigs chan os.Signal

	mainPid  int
	mainDone bool
	status   syscall.WaitStatus
	started  time.Time
	ended    time.Time
	empty    bool // no child left at all

	grace time.Duration

	// Control mode.
	out    *shared.Writer
	frames chan frameEvent
	// conn is the unix control mode's socket (-1 in other modes); eof
	// closes when the frame reader reaches its end (closeWrite).
	conn  int
	eof   chan struct{}
	relay sync.WaitGroup
	// outputs are the read ends of the agent's stdout and stderr.
	outputs []*os.File
	// pongs feeds the one goroutine that answers pings (see pong).
	pongs chan []byte

	parentGone chan struct{} // the outer watcher died (see domain.go)
	// warmed closes once the spare threads exist (warmAhead).
	warmed chan struct{}
	oom    *oomCounter // the box's OOM kills (control mode; see oom.go)
	// The agent's stdio as the watcher holds it until the agent starts.
	childEnds []*os.File
	// relayed counts output frames sent (see waitOutput).
	relayed atomic.Int64
	// agentUp is set once the agent exists: from then on the end of
	// the control stream kills the box where it is read (readFrames).
	agentUp atomic.Bool
	// killedOn is the stream error on which a reader thread SIGKILLed
	// the box (killOnStream), set before the kill: the reaper can see
	// the deaths before the loop sees the error, and ends the box as
	// that liveness loss, never as the agent's own death.
	killedOn atomic.Pointer[error]
	// pty is the master of the agent's terminal (a tty spec); stdin
	// feeds the agent's input (a stdin or tty spec). See stdin.go.
	pty   *os.File
	stdin *stdinRelay
	// spec is the host's spec (control mode), as openControl read it.
	spec shared.Spec
	// copySpec is the spec's copies (copy.go).
	copySpec *shared.Spec

	// The end of the box, once it began.
	ending     bool
	reason     shared.Reason
	code       int // a reserved code that overrides the agent's status; -1 for none
	message    string
	sweepStart time.Time
	graceC     <-chan struct{}
	killed     bool
}

type frameEvent struct {
	f   shared.Frame
	err error
}

// pid1 is the process's watcher: a variable of the package, not an
// object of the heap. The watcher rarely if ever collects, and its
// state (352 bytes) and the spec (240, kept in it) were each the only
// object of their size class: two spans resident for its life.
var pid1 watcher

// newWatcher makes the process's watcher, pid1.
func newWatcher(cfg *Config, sigs chan os.Signal) *watcher {
	pid1 = watcher{cfg: cfg, sigs: sigs, grace: cfg.Grace, code: -1, conn: -1}
	return &pid1
}

// run is the PID-1 loop. It returns the watcher's exit status.
func (w *watcher) run() int {
	markCloexec()
	if w.cfg.ParentFD > 0 {
		mountProc()
		w.parentGone = make(chan struct{})
		go watchParent(w.cfg.ParentFD, w.parentGone)
	}
	w.warmAhead()
	a, deadline, heartbeat, code := w.prepareAgent()
	if a == nil {
		return code
	}
	if code := w.startAgent(a); code != 0 {
		return code
	}
	w.watch(deadline, heartbeat)
	return w.finish()
}

// prepareAgent makes the agent from the command line, or from the
// host's spec in control mode, with the deadline and heartbeat it runs
// under. A nil agent comes with the status to exit with.
func (w *watcher) prepareAgent() (a *agent, deadline, heartbeat time.Duration, code int) {
	if w.cfg.Control == "" {
		return w.plainAgent(), w.cfg.Deadline, 0, 0
	}
	spec, code := w.openControl()
	if spec == nil {
		return nil, 0, 0, code
	}
	if a, code = w.controlAgent(spec); a == nil {
		return nil, 0, 0, code
	}
	w.grace = spec.Grace
	return a, spec.Deadline, spec.Heartbeat, 0
}

// startAgent starts the agent, drops the watcher's own privileges and
// tells the host the agent is ready. It returns 0, or the status to exit
// with.
func (w *watcher) startAgent(a *agent) int {
	if w.warmed != nil {
		<-w.warmed
	}
	path, err := lookPath(a.Argv[0], a.Env)
	if err == nil {
		a.Path = path
		w.mainPid, err = spawn(a)
	}
	w.closeChildEnds(a)
	if err != nil {
		return w.spawnFailed(a, err)
	}
	w.started = time.Now()
	w.agentUp.Store(true)
	if os.Geteuid() == 0 && (w.cfg.Control != "" || w.cfg.User != nil) {
		if err := dropSelf(w.cfg.WatcherUser, w.exportCaps()); err != nil {
			killAll(syscall.SIGKILL)
			w.drain()
			return w.setupFailed(shared.ExitSetupFailed, "drop the watcher's privileges: "+err.Error())
		}
	}
	if w.out != nil {
		_ = w.out.Send(shared.FrameReady, shared.Ready{PID: w.mainPid, Started: w.started}.Marshal())
		w.startRelay()
	}
	return 0
}

// spawnFailed ends a box whose agent could not start, refusing what the
// box cannot confine.
func (w *watcher) spawnFailed(a *agent, err error) int {
	if w.cfg.Control != "" && !w.cfg.Restricted && os.Geteuid() != 0 && errors.Is(err, syscall.EPERM) {
		// Not root in the box (sbx exec as the template's user): the
		// PID namespace came with a user namespace of one uid, and the
		// agent cannot be confined. A refusal, not a failed exec.
		return w.setupFailed(shared.ExitRefused, "not root in the box (uid "+itoa(os.Geteuid())+"): cannot drop the agent's privileges ("+err.Error()+"); refusing to start it; run the watcher as root in the box (sbx exec -u root)")
	}
	if errors.Is(err, syscall.EINVAL) && a.Cred != nil {
		// setuid/setgid to an id the box's user namespace does not map.
		if which := unmapped(a.Cred.Uid, a.Cred.Gid); which != "" {
			return w.setupFailed(shared.ExitRefused, "agent id outside this box's user namespace: "+which+"; pick --user inside it (a rootless engine maps only its user's subordinate ids)")
		}
	}
	return w.setupFailed(execStatus(err), "start "+a.Argv[0]+": "+err.Error())
}

// watch runs the box until the agent and every other process of it are
// gone: it reaps, forwards signals, takes the host's frames and ends the
// box at the deadline, on the host's silence or when the outer watcher
// dies.
func (w *watcher) watch(deadline, heartbeat time.Duration) {
	// The deadline and its grace are measured from the agent's start,
	// by the clock: time the watcher lost before this point (dropping
	// its privileges waits for every thread to be scheduled) or while
	// the TERM sweep ran comes off the wait, so the KILL lands at
	// start + deadline + grace however late a timer fired.
	var deadlineC <-chan struct{}
	deadlineAt := w.started.Add(deadline)
	if deadline > 0 {
		deadlineC = after(time.Until(deadlineAt))
	}
	var hb *alarm
	var heartbeatC <-chan struct{}
	if heartbeat > 0 {
		hb = newAlarm(heartbeat)
		heartbeatC = hb.C
	}
	w.reap()
	for !(w.mainDone && w.empty) {
		select {
		case s := <-w.sigs:
			switch s := s.(syscall.Signal); {
			case s == syscall.SIGCHLD:
				w.reap()
			case s == syscall.SIGPIPE && w.out != nil:
				// The watcher's own write to a closed pipe (the agent's
				// stdin, the control stream) raised it: not the agent's.
			case forwarded(s) && !w.mainDone:
				_ = syscall.Kill(w.mainPid, s)
			}
		case ev := <-w.frames:
			if hb != nil {
				hb.Reset(heartbeat)
			}
			w.handleFrame(ev)
		case <-w.parentGone:
			w.parentGone = nil
			w.lost("the outer watcher, outside this PID namespace, died")
		case <-deadlineC:
			deadlineC = nil
			w.beginEnd(shared.ReasonDeadline, shared.ExitDeadline, max(time.Until(deadlineAt.Add(w.grace)), 0))
		case <-heartbeatC:
			w.lost("no frame from the host for " + heartbeat.String() + " (heartbeat timeout)")
		case <-w.graceC:
			w.graceC = nil
			w.killed = true
			killAll(syscall.SIGKILL)
		}
	}
}

// killOnStream SIGKILLs the box for the stream error err once the agent
// runs, noting err first (killedOn); before that it does nothing.
func (w *watcher) killOnStream(err error) {
	if !w.agentUp.Load() {
		return
	}
	w.killedOn.CompareAndSwap(nil, &err)
	killAll(syscall.SIGKILL)
}

// watchParent closes gone when the outer watcher's end of the pipe
// closes, that is when the outer watcher dies.
func watchParent(fd int, gone chan<- struct{}) {
	f := os.NewFile(uintptr(fd), "parent")
	var b [1]byte
	for {
		if _, err := f.Read(b[:]); err != nil {
			close(gone)
			return
		}
	}
}

// spareThreads is how many threads the watcher makes before the agent
// exists. The Go runtime dies when it cannot create a thread it needs
// (newosproc), and an agent can use up a pids limit that the watcher
// shares; the runtime never destroys an idle thread, so threads made
// before the agent are there when the box is full.
const spareThreads = 4

// warmAhead makes the spare threads (when the box's pids are limited)
// while the watcher waits for the host's hello and spec, which leaves
// the runtime's one P free for it; startAgent waits for them before the
// fork.
func (w *watcher) warmAhead() {
	w.warmed = make(chan struct{})
	go func() {
		if pidsLimited() {
			warmThreads(spareThreads)
		}
		close(w.warmed)
	}()
}

// pidsLimited reports whether the watcher's own pids cgroup may run out
// (a pids.max other than "max"), or whether it cannot tell. Each thread
// made for nothing costs launch and exit time, so a box without a limit
// goes without spares.
func pidsLimited() bool {
	b, err := readFile("/proc/self/cgroup")
	if err != nil {
		return true
	}
	dir := pidsCgroupDir(string(b))
	if dir == "" {
		return true
	}
	max, err := readFile(strings.TrimSuffix(dir, "/") + "/pids.max")
	if err != nil {
		// A root cgroup has no pids.max and no limit; anything else
		// unreadable may be limited.
		var st syscall.Stat_t
		statErr := syscall.Stat(dir, &st)
		return !os.IsNotExist(err) || statErr != nil
	}
	return strings.TrimSpace(string(max)) != "max"
}

// pidsCgroupDir is the folder of the pids cgroup named by the contents
// of /proc/self/cgroup: "N:pids:/path" on cgroup v1 (also on a hybrid
// host, whose "0::" line names a v2 tree without controllers), else
// "0::/path" on v2. "" when neither is there.
func pidsCgroupDir(procCgroup string) string {
	dir, _ := cgroupDir(procCgroup, "pids")
	return dir
}

// warmThreads makes the runtime hold at least n threads: n goroutines
// each park locked to a thread of its own, then let go.
func warmThreads(n int) {
	var parked, done sync.WaitGroup
	release := make(chan struct{})
	parked.Add(n)
	done.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			runtime.LockOSThread()
			parked.Done()
			<-release
			runtime.UnlockOSThread()
			done.Done()
		}()
	}
	parked.Wait()
	close(release)
	done.Wait()
}

// beginEnd starts the end of the box: TERM to every process, KILL after
// the grace (at once when the grace is 0). The loop ends as soon as no
// process is left, never after a fixed sleep.
func (w *watcher) beginEnd(reason shared.Reason, code int, grace time.Duration) {
	if w.ending {
		if grace == 0 && !w.killed {
			w.killed = true
			killAll(syscall.SIGKILL)
		}
		return
	}
	w.ending, w.reason, w.code = true, reason, code
	w.sweepStart = time.Now()
	if grace == 0 {
		w.killed = true
		killAll(syscall.SIGKILL)
		return
	}
	killAll(syscall.SIGTERM)
	w.graceC = after(grace)
}

// lost is a liveness loss: everything dies at once.
// The SIGKILL goes before the log line: the write to stderr goes
// through the engine's pipe, and nothing of the box waits for it.
func (w *watcher) lost(why string) {
	say := !w.ending || w.reason != shared.ReasonLivenessLost
	if !w.ending {
		w.message = why
	}
	w.beginEnd(shared.ReasonLivenessLost, shared.ExitLivenessLost, 0)
	if say {
		logf("liveness lost: " + why + "; killing the box")
	}
}

// drain reaps until no child is left (after a SIGKILL to all).
func (w *watcher) drain() {
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.ECHILD) {
			return
		}
	}
}

// finish sends the exit record and works out the status.
func (w *watcher) finish() int {
	code := w.code
	sig := 0
	if w.status.Signaled() {
		sig = int(w.status.Signal())
	}
	if code < 0 {
		code = waitCode(w.status)
	}
	var sweep time.Duration
	if !w.sweepStart.IsZero() {
		sweep = time.Since(w.sweepStart)
	}
	if w.out != nil {
		// Output first: every writer is dead, so the pipes reach EOF.
		w.waitOutput()
		w.copyOut()
		rec := shared.Exit{Reason: w.reason, Code: code, Signal: sig, Runtime: w.ended.Sub(w.started), Sweep: sweep, Message: w.message}
		waitTimeout(func() { w.stdin.stop(); _ = w.out.Send(shared.FrameExit, rec.Marshal()) }, time.Second)
		w.closeWrite(time.Second)
	}
	return code
}

// setupFailed ends a box whose agent never ran.
func (w *watcher) setupFailed(code int, msg string) int {
	return w.failedBeforeStart(shared.ReasonSetupFailed, code, msg)
}

// failedBeforeStart ends a box whose agent never ran, for reason. The
// exit record carries msg to the supervisor, which says it: the
// watcher's own stderr says it only when the record was not sent.
func (w *watcher) failedBeforeStart(reason shared.Reason, code int, msg string) int {
	var sent atomic.Bool
	if w.out != nil {
		rec := shared.Exit{Reason: reason, Code: code, Message: msg}
		waitTimeout(func() { sent.Store(w.out.Send(shared.FrameExit, rec.Marshal()) == nil) }, time.Second)
		w.closeWrite(time.Second)
	}
	if !sent.Load() {
		logf(msg)
	}
	return code
}

func waitTimeout(f func(), d time.Duration) {
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-after(d):
	}
}

// execStatus maps a failure to start the agent to tini's codes.
func execStatus(err error) int {
	switch {
	case errors.Is(err, errNotFound), errors.Is(err, syscall.ENOENT):
		return shared.ExitNotFound
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EPERM):
		return shared.ExitCannotExec
	}
	return shared.ExitSetupFailed
}

// plainAgent: tini's shape, the agent inherits fds 0-2 and the
// environment, and leads a process group of its own, which is the
// terminal's foreground group when stdin is the watcher's controlling
// terminal: ^C reaches the agent once, from the terminal, and not the
// watcher; a `kill 0` of the agent reaches its own group only.
func (w *watcher) plainAgent() *agent {
	a := &agent{Argv: w.cfg.Argv, Env: os.Environ(), Files: []uintptr{0, 1, 2}, Setpgid: true, Foreground: stdinIsCtty()}
	if u := w.cfg.User; u != nil {
		a.Cred = &syscall.Credential{Uid: u.UID, Gid: u.GID}
		a.DropCaps = true
	}
	return a
}

// markCloexec makes every inherited descriptor above 2 close-on-exec,
// so that the agent starts with exactly what it is given.
func markCloexec() {
	if err := closeRangeCloexec(3); err == nil {
		return
	}
	// Not os.ReadDir or Readdirnames: see shared.ReadDirNames.
	names, _ := shared.ReadDirNames("/proc/self/fd")
	for _, name := range names {
		fd := 0
		for _, c := range name {
			fd = fd*10 + int(c-'0')
		}
		if fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// readFrames feeds the loop; it ends at the first error. Once the
// agent runs, any error of the stream (its end, a broken frame) is a
// liveness loss (handleFrame): the box is SIGKILLed here, on the thread
// that read it, before the loop's goroutine is even woken (on a loaded
// host that wake-up is the slow part); the loop then ends the box.
func (w *watcher) readFrames(r io.Reader) {
	fr := shared.NewReader(bufio.NewReaderSize(r, 64<<10))
	for {
		f, err := fr.Next()
		if err != nil {
			w.killOnStream(err)
			if w.eof != nil {
				close(w.eof)
			}
		}
		w.frames <- frameEvent{f, err}
		if err != nil {
			return
		}
	}
}
