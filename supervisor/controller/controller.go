// Package controller watches the link between `supervisor exec` and the
// controller that started it: the supervisor's parent process by
// default, a descriptor whose EOF is the controller's death
// (--controller-fd), or a named process checked with its start time
// (--controller-pid). Lost closes when that link ends; exec ends the box
// then, as after a SIGKILL of the supervisor, but in order.
package controller

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"deathwatch/supervisor/proc"
)

// Links a Watch can have, as the journal and doctor name them.
const (
	LinkParent    = "parent"    // a handle on the parent process (pidfd, kqueue, process handle)
	LinkPdeathsig = "pdeathsig" // PR_SET_PDEATHSIG: Linux without pidfds; fires when the parent thread exits
	LinkFD        = "fd"        // --controller-fd: EOF of a descriptor the controller holds the other end of
	LinkPID       = "pid"       // --controller-pid: a named process, checked with its start time
	LinkDetached  = "detached"  // --detach: nothing is watched
)

// Spec says which link to watch. The zero Spec watches nothing: a Go
// controller that calls supervisor.Exec in its own process is the
// process that dies, and needs no watch.
type Spec struct {
	Parent bool // watch the parent process
	// FD, when HasFD, is a descriptor whose EOF (or hang-up) is the
	// controller's death; data read from it is ignored.
	FD    int
	HasFD bool
	// PID names the controller's process; StartTime, when not 0, must
	// be its start time (proc.StartTime), so that a reused pid is never
	// taken for it.
	PID       int
	StartTime uint64
	// Detached watches nothing and records the parent (Take's Watch
	// names it, its Lost never closes).
	Detached bool
}

// Any reports whether s asks for a watch.
func (s Spec) Any() bool { return s.Parent || s.HasFD || s.PID > 0 || s.Detached }

// ErrGone is the controller already gone when the watch is taken: the
// supervisor must not start a box.
var ErrGone = errors.New("the controller is gone")

// startParent is the parent at the supervisor's start, read as early as
// a Go program can: a parent that dies after this is caught by Take's
// re-check, one that died before it left the supervisor with init (pid
// 1) as its parent, which Take refuses.
var startParent = os.Getppid()

// Watch is a taken link. Lost is closed once the controller is gone.
type Watch struct {
	Link      string
	PID       int    // the controller's pid (0: unknown, LinkFD)
	StartTime uint64 // its start time (0: unknown)

	lost    chan struct{}
	once    sync.Once
	why     string
	mu      sync.Mutex
	stop    func()
	stopped bool
	hooks   []func()
}

func newWatch(link string, pid int) *Watch {
	return &Watch{Link: link, PID: pid, lost: make(chan struct{})}
}

// Lost is closed when the controller is gone (never, for nil).
func (w *Watch) Lost() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.lost
}

// Why says in words how the controller was lost ("" before Lost).
func (w *Watch) Why() string {
	select {
	case <-w.Lost():
		return w.why
	default:
		return ""
	}
}

// Describe names the link in a line, e.g. "parent pid 42 (pidfd)".
func (w *Watch) Describe() string {
	switch {
	case w == nil:
		return "none"
	case w.PID > 0:
		return fmt.Sprintf("%s pid %d", w.Link, w.PID)
	}
	return w.Link
}

// OnLost runs f as soon as the controller is lost, on the watch's own
// goroutine before Lost closes (at once when it is lost already): for
// the one step that must not wait for another goroutine to be scheduled,
// such as closing the box's control stream. f must not block.
func (w *Watch) OnLost(f func()) {
	if w == nil {
		return
	}
	w.mu.Lock()
	select {
	case <-w.lost:
		w.mu.Unlock()
		f()
		return
	default:
	}
	w.hooks = append(w.hooks, f)
	w.mu.Unlock()
}

// Close stops watching (Lost stays open).
func (w *Watch) Close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop != nil && !w.stopped {
		w.stopped = true
		w.stop()
	}
}

// gone closes Lost with why, once; a watch closed by Close stays open.
func (w *Watch) gone(why string) {
	w.once.Do(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.stopped {
			return
		}
		for _, f := range w.hooks {
			f()
		}
		w.why = why
		close(w.lost)
	})
}

// Doctor says in a line which controller link this host gives exec by
// default, for `supervisor doctor`.
func Doctor() string {
	if Supported() == LinkPdeathsig {
		return "pdeathsig (no pidfds: the supervisor dies when the parent thread that started it exits; start it from a thread that lives, or pass --controller-fd)"
	}
	return parentMechanism + " (the supervisor dies with its parent process; --controller-fd for a controller behind a shell or a pool)"
}

// Take takes the link s asks for (nil, nil when it asks for none). A
// controller already gone is ErrGone; a descriptor or pid that cannot
// be watched is an error that says which.
func Take(s Spec) (*Watch, error) {
	switch {
	case s.Detached:
		w := newWatch(LinkDetached, startParent)
		w.StartTime, _ = proc.StartTime(startParent)
		return w, nil
	case s.HasFD:
		return watchFD(s.FD)
	case s.PID > 0:
		return watchPID(s.PID, s.StartTime)
	case s.Parent:
		return watchParent(startParent)
	}
	return nil, nil
}

// parentVerdict closes the race of the parent watch: start is the
// parent at the supervisor's start, now getppid() after the handle was
// taken, openErr the error of taking it. A parent that is init, that
// could not be found, or that is not our parent any more (we were
// reparented) is gone. Pure.
func parentVerdict(start, now int, openErr error) error {
	switch {
	case start <= 1:
		return fmt.Errorf("%w: the supervisor's parent is pid %d (its starter exited and init adopted it); start `supervisor exec` as a child of the controller, or name it with --controller-pid or --controller-fd", ErrGone, start)
	case openErr != nil && isNoProcess(openErr):
		return fmt.Errorf("%w: parent pid %d exited before the watch was taken", ErrGone, start)
	case openErr != nil:
		return fmt.Errorf("watch parent pid %d: %w", start, openErr)
	case now != start:
		return fmt.Errorf("%w: parent pid %d exited before the watch was taken (the parent is now pid %d)", ErrGone, start, now)
	}
	return nil
}

// startVerdict checks a named controller's start time: want 0 takes
// any. Pure.
func startVerdict(pid int, want, got uint64, err error) error {
	switch {
	case err != nil && isNoProcess(err):
		return fmt.Errorf("%w: controller pid %d does not exist", ErrGone, pid)
	case err != nil:
		return fmt.Errorf("read the start time of controller pid %d: %w", pid, err)
	case want != 0 && got != want:
		return fmt.Errorf("%w: controller pid %d started at %d, not %d (the pid was reused)", ErrGone, pid, got, want)
	}
	return nil
}
