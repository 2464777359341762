package ktest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
)

// ControlMode says how the control stream reaches the watcher.
type ControlMode int

const (
	// ControlFD passes one end of a socketpair as fd 3: --control=fd:3
	// (the native runtime's form).
	ControlFD ControlMode = iota
	// ControlStdin uses a pipe each way on the watcher's fds 0 and 1:
	// --control=stdin (the docker/podman `run -i` form).
	ControlStdin
)

func (m ControlMode) String() string {
	if m == ControlStdin {
		return "stdin"
	}
	return "fd"
}

// Options say how a Controller starts the watcher.
type Options struct {
	Control ControlMode
	// PID1 runs the watcher under `unshare --pid --fork --mount-proc`, so
	// that it is PID 1 of a fresh namespace. Without it the watcher starts
	// as an ordinary child of the test and must make its own namespace.
	PID1 bool
	// Standin puts a separate stand-in controller process (the standin
	// program's relay) between the test and the watcher: it holds the
	// only host end of the stream, so KillStandin is "the controller was
	// SIGKILLed" and StopStandin is "the controller froze".
	Standin bool
	// Flags are extra watcher flags, placed before --control.
	Flags []string
}

// Controller drives one watcher in control mode the way the supervisor
// would, and records everything that comes back.
type Controller struct {
	t       testing.TB
	Watcher *exec.Cmd // the watcher, or unshare running it
	Standin *exec.Cmd // nil unless Options.Standin
	Started time.Time

	out        io.Writer // frames towards the watcher
	closeWrite func() error
	w          *shared.Writer

	mu       sync.Mutex
	changed  chan struct{}  // closed and replaced on every change
	frames   []shared.Frame // all control frames; data frames up to maxKept
	data     DataStats
	readErr  error
	readDone bool
	stdout   bytes.Buffer // the agent's, from stdout frames
	stderr   bytes.Buffer // the agent's, from stderr frames
	werr     bytes.Buffer // the watcher's own stdout+stderr (not frames)
	exited   bool
	exitAt   time.Time
	state    *os.ProcessState
	waitErr  error
	pingStop chan struct{}
	pingDone chan struct{}
	paused   chan struct{} // non-nil while reading is paused
	lastPong time.Time     // when the last pong arrived
	// Stdin is the credit the watcher granted (stdin-credit frames are
	// counted here, not kept in frames); SendStdin honours it.
	Stdin   shared.StdinWindow
	credits int
}

// LastPong is when the last pong frame arrived (zero when none did):
// the latest moment the test knows the watcher heard from the host.
func (c *Controller) LastPong() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.lastPong }

// maxKept is how much agent output a Controller keeps.
const maxKept = 8 << 20

// DataStats counts the stdout and stderr frames received.
type DataStats struct {
	Frames  int
	Bytes   int64
	Largest int // payload bytes of the largest data frame
}

// Data returns the counts of output frames so far.
func (c *Controller) Data() DataStats { c.mu.Lock(); defer c.mu.Unlock(); return c.data }

// lockedWriter appends to a Controller buffer under its lock.
type lockedWriter struct {
	c   *Controller
	buf *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.buf.Write(p)
}

// WatcherEnv is the watcher's own environment in every test: nothing
// secret, and GOCOVERDIR passed through for coverage runs.
func WatcherEnv() []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if d := os.Getenv("GOCOVERDIR"); d != "" {
		env = append(env, "GOCOVERDIR="+d)
	}
	return env
}

// WatcherArgv is the command line that starts the watcher binary bin with
// args, as PID 1 of a new namespace when pid1 is set.
func WatcherArgv(bin string, pid1 bool, args ...string) []string {
	if pid1 {
		return append([]string{"unshare", "--pid", "--fork", "--mount-proc", bin}, args...)
	}
	return append([]string{bin}, args...)
}

// StartController starts the watcher binary bin in control mode and the
// frame reader; the caller then sends hello and spec (or Launch does).
// Everything it started is killed when the test ends.
func StartController(t testing.TB, bin string, o Options) *Controller {
	t.Helper()
	c := &Controller{t: t, changed: make(chan struct{})}
	var closeAfterStart []*os.File
	var readSide *os.File
	args := append([]string{}, o.Flags...)

	switch o.Control {
	case ControlFD:
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("socketpair: %v", err)
		}
		box, host := os.NewFile(uintptr(fds[0]), "control-box"), os.NewFile(uintptr(fds[1]), "control-host")
		args = append(args, "--control=fd:3")
		c.Watcher = command(WatcherArgv(bin, o.PID1, args...))
		c.Watcher.ExtraFiles = []*os.File{box}
		c.Watcher.Stdout = lockedWriter{c, &c.werr}
		closeAfterStart = append(closeAfterStart, box)
		if o.Standin {
			c.Standin = c.standinCmd(t, host, host)
			toStandin, err := c.Standin.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			fromStandin, fw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			c.Standin.Stdout = fw
			closeAfterStart = append(closeAfterStart, host, fw)
			readSide, c.out = fromStandin, toStandin
			c.closeWrite = toStandin.Close
		} else {
			readSide, c.out = host, host
			c.closeWrite = func() error {
				rc, err := host.SyscallConn()
				if err != nil {
					return err
				}
				var serr error
				if err := rc.Control(func(fd uintptr) { serr = syscall.Shutdown(int(fd), syscall.SHUT_WR) }); err != nil {
					return err
				}
				return serr
			}
		}
	case ControlStdin:
		inR, inW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "--control=stdin")
		c.Watcher = command(WatcherArgv(bin, o.PID1, args...))
		c.Watcher.Stdin, c.Watcher.Stdout = inR, outW
		closeAfterStart = append(closeAfterStart, inR, outW)
		readSide = outR
		if o.Standin {
			c.Standin = c.standinCmd(t, inW, nil)
			toStandin, err := c.Standin.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			closeAfterStart = append(closeAfterStart, inW)
			c.out = toStandin
			c.closeWrite = toStandin.Close
		} else {
			c.out = inW
			c.closeWrite = inW.Close
		}
	}
	c.Watcher.Stderr = lockedWriter{c, &c.werr}
	// A control-mode watcher gets what every runtime adds to its
	// environment, as in production.
	c.Watcher.Env = append(WatcherEnv(), supervisor.WatcherEnv...)
	c.Watcher.WaitDelay = 5 * time.Second
	c.w = shared.NewWriter(c.out)

	c.Started = time.Now()
	if err := c.Watcher.Start(); err != nil {
		t.Fatalf("start %s: %v", strings.Join(c.Watcher.Args, " "), err)
	}
	if c.Standin != nil {
		if err := c.Standin.Start(); err != nil {
			_ = c.Watcher.Process.Kill()
			t.Fatalf("start the stand-in controller: %v", err)
		}
	}
	for _, f := range closeAfterStart {
		_ = f.Close()
	}
	t.Cleanup(c.cleanup)
	go c.readLoop(readSide)
	go c.waitLoop()
	return c
}

func command(argv []string) *exec.Cmd { return exec.Command(argv[0], argv[1:]...) }

func (c *Controller) standinCmd(t testing.TB, to, from *os.File) *exec.Cmd {
	cmd := exec.Command(StandinPath(t), "relay")
	cmd.ExtraFiles = []*os.File{to}
	if from != nil {
		cmd.Args[1] = "relay-both"
		cmd.ExtraFiles = append(cmd.ExtraFiles, from)
	}
	cmd.Stderr = lockedWriter{c, &c.werr}
	return cmd
}

func (c *Controller) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Controller) readLoop(f *os.File) {
	if f != c.out {
		defer f.Close() // else cleanup closes it: it is the write side too
	}
	r := shared.NewReader(bufio.NewReaderSize(f, 64<<10))
	for {
		c.mu.Lock()
		gate := c.paused
		c.mu.Unlock()
		if gate != nil {
			<-gate
		}
		fr, err := r.Next()
		c.mu.Lock()
		if err != nil {
			c.readErr, c.readDone = err, true
			c.Stdin.Close()
			c.notify()
			c.mu.Unlock()
			return
		}
		switch fr.Type {
		case shared.FrameStdinCredit:
			c.credits++
			if err := c.Stdin.Grant(fr.Payload); err != nil {
				c.readErr, c.readDone = err, true
				c.Stdin.Close()
				c.notify()
				c.mu.Unlock()
				return
			}
		case shared.FrameStdout, shared.FrameStderr:
			// A flooding agent must not flood the test's memory: keep
			// the first maxKept bytes of output, count the rest.
			c.data.Frames++
			c.data.Bytes += int64(len(fr.Payload))
			c.data.Largest = max(c.data.Largest, len(fr.Payload))
			if c.data.Bytes <= maxKept {
				c.frames = append(c.frames, fr)
				if fr.Type == shared.FrameStdout {
					c.stdout.Write(fr.Payload)
				} else {
					c.stderr.Write(fr.Payload)
				}
			}
		case shared.FrameExit:
			c.Stdin.Close()
			c.frames = append(c.frames, fr)
		default:
			if fr.Type == shared.FramePong {
				c.lastPong = time.Now()
			}
			c.frames = append(c.frames, fr)
		}
		c.notify()
		c.mu.Unlock()
	}
}

// Credits is how many stdin-credit frames arrived.
func (c *Controller) Credits() int { c.mu.Lock(); defer c.mu.Unlock(); return c.credits }

// SendStdin sends data as stdin frames as the credit allows, as a
// supervisor must: it waits whenever the credit is used up.
func (c *Controller) SendStdin(data []byte) error { return c.Stdin.Send(c.w, data) }

// SendStdinEOF ends the agent's input.
func (c *Controller) SendStdinEOF() error { return c.Send(shared.FrameStdinEOF, nil) }

// Resize sends a new window size for the agent's pty.
func (c *Controller) Resize(rows, cols uint16) error {
	return c.Send(shared.FrameResize, shared.Resize{Rows: rows, Cols: cols}.Marshal())
}

func (c *Controller) waitLoop() {
	err := c.Watcher.Wait()
	c.mu.Lock()
	c.exited, c.exitAt, c.state, c.waitErr = true, time.Now(), c.Watcher.ProcessState, err
	c.notify()
	c.mu.Unlock()
}

// waitCond waits until pred (called with c.mu held) holds or timeout.
func (c *Controller) waitCond(timeout time.Duration, pred func() bool) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		ok := pred()
		ch := c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-timer.C:
			c.mu.Lock()
			defer c.mu.Unlock()
			return pred()
		}
	}
}

// Send writes one frame towards the watcher.
func (c *Controller) Send(t shared.FrameType, payload []byte) error {
	return c.w.Send(t, payload)
}

// SendRaw writes bytes towards the watcher as they are (garbage,
// truncated frames).
func (c *Controller) SendRaw(b []byte) error {
	_, err := c.out.Write(b)
	return err
}

// Hello sends a hello of this protocol version.
func (c *Controller) Hello() error {
	return c.Send(shared.FrameHello, shared.Hello{Version: shared.ProtocolVersion, Nonce: "ktest-nonce"}.Marshal())
}

// Launch sends hello and spec and waits for ready; it fails the test when
// the watcher does not start the agent.
func (c *Controller) Launch(spec shared.Spec) shared.Ready {
	c.t.Helper()
	if err := c.Hello(); err != nil {
		c.t.Fatalf("send hello: %v\n%s", err, c.Diagnostics())
	}
	if err := c.Send(shared.FrameSpec, spec.Marshal()); err != nil {
		c.t.Fatalf("send spec: %v\n%s", err, c.Diagnostics())
	}
	r, err := c.WaitReady(10 * time.Second)
	if err != nil {
		c.t.Fatalf("%v\n%s", err, c.Diagnostics())
	}
	return r
}

// WaitReady waits for the ready frame.
func (c *Controller) WaitReady(timeout time.Duration) (shared.Ready, error) {
	f, ok := c.WaitFrame(shared.FrameReady, timeout)
	if !ok {
		return shared.Ready{}, fmt.Errorf("no ready frame within %s", timeout)
	}
	r, err := shared.ParseReady(f.Payload)
	if err != nil {
		return shared.Ready{}, fmt.Errorf("parse ready: %w", err)
	}
	return r, nil
}

// WaitFrame waits for the first frame of type ft; false when the stream
// or the watcher ended without one, or on timeout.
func (c *Controller) WaitFrame(ft shared.FrameType, timeout time.Duration) (shared.Frame, bool) {
	var found shared.Frame
	ok := c.waitCond(timeout, func() bool {
		for _, f := range c.frames {
			if f.Type == ft {
				found = f
				return true
			}
		}
		return c.readDone
	})
	return found, ok && found.Type == ft
}

// WaitStdout waits until the agent's stdout contains s.
func (c *Controller) WaitStdout(s string, timeout time.Duration) bool {
	return c.waitCond(timeout, func() bool { return strings.Contains(c.stdout.String(), s) || c.readDone })
}

// Stdout is what the agent wrote to stdout so far (from frames).
func (c *Controller) Stdout() string { c.mu.Lock(); defer c.mu.Unlock(); return c.stdout.String() }

// Stderr is what the agent wrote to stderr so far (from frames).
func (c *Controller) Stderr() string { c.mu.Lock(); defer c.mu.Unlock(); return c.stderr.String() }

// WatcherOutput is the watcher's own stderr (and stdout in fd mode).
func (c *Controller) WatcherOutput() string { c.mu.Lock(); defer c.mu.Unlock(); return c.werr.String() }

// Frames returns a copy of the frames received so far.
func (c *Controller) Frames() []shared.Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]shared.Frame(nil), c.frames...)
}

// Exited reports whether the watcher process has exited.
func (c *Controller) Exited() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.exited }

// PauseReading stops reading the box→host direction (a controller whose
// reader is stuck while the rest of it, pings included, goes on): the
// watcher's writes fill the stream and block. At most one more frame is
// read after the call.
func (c *Controller) PauseReading() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused == nil {
		c.paused = make(chan struct{})
	}
}

// ResumeReading undoes PauseReading.
func (c *Controller) ResumeReading() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused != nil {
		close(c.paused)
		c.paused = nil
	}
}

// CloseWrite ends the host→box direction the orderly way: the watcher
// reads EOF.
func (c *Controller) CloseWrite() error { return c.closeWrite() }

// KillStandin SIGKILLs the stand-in controller and returns when it did.
func (c *Controller) KillStandin() time.Time {
	c.t.Helper()
	if c.Standin == nil {
		c.t.Fatal("KillStandin: started without Options.Standin")
	}
	at := time.Now()
	if err := c.Standin.Process.Kill(); err != nil {
		c.t.Fatalf("SIGKILL the stand-in controller: %v", err)
	}
	return at
}

// StopStandin freezes the stand-in controller (SIGSTOP): nothing reaches
// the watcher any more, but the stream stays open.
func (c *Controller) StopStandin() time.Time {
	c.t.Helper()
	if c.Standin == nil {
		c.t.Fatal("StopStandin: started without Options.Standin")
	}
	at := time.Now()
	if err := c.Standin.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP the stand-in controller: %v", err)
	}
	return at
}

// ContStandin resumes a frozen stand-in controller.
func (c *Controller) ContStandin() {
	if c.Standin != nil && c.Standin.Process != nil {
		_ = c.Standin.Process.Signal(syscall.SIGCONT)
	}
}

// StartPings sends a ping every interval until StopPings or a send
// fails. Pings to a stopped stand-in pile up in its pipe, unread.
func (c *Controller) StartPings(interval time.Duration) {
	c.pingStop, c.pingDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.pingDone)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for seq := shared.Seq(1); ; seq++ {
			if c.Send(shared.FramePing, seq.Marshal()) != nil {
				return
			}
			select {
			case <-c.pingStop:
				return
			case <-tick.C:
			}
		}
	}()
}

// StopPings stops StartPings.
func (c *Controller) StopPings() {
	if c.pingStop != nil {
		close(c.pingStop)
		<-c.pingDone
		c.pingStop = nil
	}
}

// Result is how a watcher run ended.
type Result struct {
	Code     int // the watcher's exit status; -1 when killed by a signal
	Signal   syscall.Signal
	Exit     *shared.Exit // the final exit record, nil when none arrived
	ExitErr  error        // why the exit record could not be parsed
	At       time.Time    // when the watcher process was reaped
	Elapsed  time.Duration
	StreamOK bool // the stream ended cleanly (io.EOF) after the frames
}

// Wait waits for the watcher to exit and for its stream to end, and
// returns how it ended; it fails the test on timeout.
func (c *Controller) Wait(timeout time.Duration) Result {
	c.t.Helper()
	if !c.waitCond(timeout, func() bool { return c.exited }) {
		c.t.Fatalf("the watcher did not exit within %s\n%s", timeout, c.Diagnostics())
	}
	// The stream ends once the watcher (and a stand-in) let go of it.
	c.waitCond(5*time.Second, func() bool { return c.readDone })
	c.mu.Lock()
	defer c.mu.Unlock()
	res := Result{At: c.exitAt, Elapsed: c.exitAt.Sub(c.Started), StreamOK: c.readErr == io.EOF}
	ws := c.state.Sys().(syscall.WaitStatus)
	switch {
	case ws.Exited():
		res.Code = ws.ExitStatus()
	case ws.Signaled():
		res.Code, res.Signal = -1, ws.Signal()
	}
	for i := len(c.frames) - 1; i >= 0; i-- {
		if c.frames[i].Type == shared.FrameExit {
			x, err := shared.ParseExit(c.frames[i].Payload)
			if err != nil {
				res.ExitErr = err
			} else {
				res.Exit = &x
			}
			break
		}
	}
	return res
}

// Diagnostics describes the run so far for a failure message.
func (c *Controller) Diagnostics() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var types []string
	for _, f := range c.frames {
		if n := len(types); n > 0 && strings.HasPrefix(types[n-1], f.Type.String()) {
			name, count, _ := strings.Cut(types[n-1], "×")
			k := 1
			fmt.Sscan(count, &k)
			types[n-1] = fmt.Sprintf("%s×%d", name, k+1)
			continue
		}
		types = append(types, f.Type.String())
	}
	state := "running"
	if c.exited {
		state = c.state.String()
	}
	clip := func(s string) string {
		if len(s) > 4096 {
			return s[:2048] + fmt.Sprintf("\n[... %d bytes ...]\n", len(s)-4096) + s[len(s)-2048:]
		}
		return s
	}
	return fmt.Sprintf("watcher %q: %s; frames [%s] (%d output frames, %d bytes); read end: %v\nwatcher stderr:\n%s\nagent stdout:\n%s\nagent stderr:\n%s",
		strings.Join(c.Watcher.Args, " "), state, strings.Join(types, " "), c.data.Frames, c.data.Bytes, c.readErr, clip(c.werr.String()), clip(c.stdout.String()), clip(c.stderr.String()))
}

// BoxNamespace returns the PID namespace the watcher made or lives in:
// that of the first descendant of the started process (or the process
// itself) whose namespace is not the test's. It fails the test when none
// appears within timeout.
func (c *Controller) BoxNamespace(timeout time.Duration) string {
	c.t.Helper()
	own, err := PIDNamespace(os.Getpid())
	if err != nil {
		c.t.Fatalf("read own pid namespace: %v", err)
	}
	var ns string
	ok := WaitFor(timeout, func() bool {
		root := c.Watcher.Process.Pid
		cands := append([]Proc{{PID: root}}, Descendants(root)...)
		for _, p := range cands {
			if l, err := PIDNamespace(p.PID); err == nil && l != own {
				ns = l
				return true
			}
		}
		return false
	})
	if !ok {
		c.t.Fatalf("no process of the watcher is in a PID namespace of its own after %s\n%s", timeout, c.Diagnostics())
	}
	return ns
}

// BoxInit returns the box's PID 1 (the watcher as the box sees it).
func BoxInit(ns string) (Proc, error) {
	for _, p := range InNamespace(ns) {
		if n, err := NSPid(p.PID); err == nil && len(n) > 1 && n[len(n)-1] == 1 {
			return p, nil
		}
	}
	return Proc{}, fmt.Errorf("no PID 1 found in %s", ns)
}

func (c *Controller) cleanup() {
	c.Stdin.Close()
	c.ResumeReading()
	c.StopPings()
	if c.Standin != nil && c.Standin.Process != nil {
		_ = c.Standin.Process.Signal(syscall.SIGCONT)
		_ = c.Standin.Process.Kill()
		_ = c.Standin.Wait()
	}
	if !c.Exited() {
		// Kill whatever the box holds first: the watcher may be
		// unresponsive, and its namespace dies with its PID 1.
		own, _ := PIDNamespace(os.Getpid())
		for _, p := range append(Descendants(c.Watcher.Process.Pid), Proc{PID: c.Watcher.Process.Pid}) {
			if l, err := PIDNamespace(p.PID); err == nil && l != own {
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
		_ = c.Watcher.Process.Kill()
		c.waitCond(10*time.Second, func() bool { return c.exited })
	}
	if closer, ok := c.out.(io.Closer); ok {
		_ = closer.Close()
	}
}

// StandinPath builds the standin program once per test process (see
// ToolPath) and returns its path.
func StandinPath(t testing.TB) string {
	t.Helper()
	return ToolPath(t, "standin")
}

// ExitStatus runs cmd to completion within timeout and returns its exit
// status (128+N for death by signal N, as a shell reports it) and its
// combined output.
func ExitStatus(cmd *exec.Cmd, timeout time.Duration) (int, string, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	// On timeout kill the tree, not only the child: under unshare the
	// watcher is a grandchild and would live on.
	timer := time.AfterFunc(timeout, func() {
		for _, p := range Descendants(cmd.Process.Pid) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
	})
	err := cmd.Wait()
	expired := !timer.Stop()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		return 0, out.String(), err
	}
	if expired {
		return 0, out.String(), fmt.Errorf("%s did not finish within %s", cmd.Path, timeout)
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal()), out.String(), nil
	}
	return ws.ExitStatus(), out.String(), nil
}
