package docker

// Local Podman without a service: one `podman run` per launch
// (supervisor.OneStepStarter), because every podman process is a whole
// Go program that sets up its storage. The one client folds in:
//   - the probe: the CLI on PATH; rootless exactly when this process is
//     not root. Whether it works is the run's own failure.
//   - the image check: `--pull never` fails the run before anything is
//     created; only then is `image exists` asked, off the hot path.
//   - create and start: `run --interactive` attaches the watcher's stdin
//     and stdout (the control stream); --cidfile, written after the
//     create and before the start, says the box exists, so the lifecycle
//     journals "created" and a run that failed without it created nothing.
//   - remove: `run --rm` removes the box before the client exits, and
//     says on stderr when it could not; a client that ends silent and by
//     itself proves the removal (runEnd), and the listing proves it
//     otherwise.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/internal/attach"
	"deathwatch/supervisor/internal/firstline"
	"deathwatch/supervisor/mountsource"
)

// runArgs is `run` with createArgs' box: the same flags, --cidfile,
// which podman writes once the box exists, and no detach keys: the
// control stream is bytes, and a client that detached would exit
// without removing the box.
func runArgs(kind string, b *supervisor.Box, conf boxConf, cidfile string) []string {
	a := createArgs(kind, b, conf)
	run := []string{"run", "--cidfile", cidfile, "--detach-keys="}
	if conf.livePipe {
		// The client's descriptor 3, the live pipe's read end (livefd_linux.go).
		run = append(run, "--preserve-fds", "1")
	}
	return append(run, a[1:]...)
}

// OneStep says yes for a local Podman without a service socket: the CLI
// serves, and one `podman run` can do the work of four calls. Docker (its
// Engine API, or a CLI whose create and start race nothing) and a podman
// service or remote keep the separate steps.
func (e *Engine) OneStep(ctx context.Context) (supervisor.Info, bool, error) {
	if e.Kind != "podman" || e.podmanRemote() || e.client(ctx) != nil {
		return supervisor.Info{}, false, nil
	}
	info := supervisor.Info{Runtime: e.Kind}
	if _, err := exec.LookPath(e.bin()); err != nil {
		info.Detail = fmt.Sprintf("%s is not installed (not found on PATH); install it or pick another --runtime", e.Kind)
		return info, true, exitcode.Engine("%s", info.Detail)
	}
	info.Present, info.Rootless = true, os.Geteuid() != 0
	e.rootless = info.Rootless
	e.podmanIDs(&info)
	e.warnShared(info)
	return info, true, nil
}

// CreateStart starts `podman run` attached, in its own process group
// (supervisor/internal/attach). Its stderr is held until the box exists:
// what podman says before that is a failure to create, said in the
// error's one line instead.
func (e *Engine) CreateStart(ctx context.Context, b *supervisor.Box) (*supervisor.Started, func() error, error) {
	if err := mountsource.Check(b.Mounts); err != nil {
		return nil, nil, err
	}
	if err := e.ownIDs(ctx, b); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", runDirPattern(b))
	if err != nil {
		e.dropOwnIDs(b)
		return nil, nil, exitcode.Setup("start box %s: %w", b.Name, err)
	}
	cid := filepath.Join(dir, "cid")
	// The client's stderr is a pipe copied here, so that Remove knows
	// whether all of it was read (EOF), whatever the client's status.
	errR, errW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		e.dropOwnIDs(b)
		return nil, nil, exitcode.Setup("start box %s: %w", b.Name, err)
	}
	conf := e.boxConf()
	pass, passed := e.livePass(b.Name)
	conf.livePipe = pass != nil
	cmd := e.command(nil, runArgs(e.Kind, b, conf, cid))
	if pass != nil {
		cmd.ExtraFiles = []*os.File{pass}
	}
	st, err := attach.Start(cmd, e.Kind, b.Name, errW)
	errW.Close()
	passed()
	if err != nil {
		errR.Close()
		os.RemoveAll(dir)
		e.dropOwnIDs(b)
		return nil, nil, err
	}
	gate := &heldWriter{w: e.Stderr}
	read := make(chan struct{})
	go func() { io.Copy(gate, errR); errR.Close(); close(read) }()
	// The client's end is watched here and told to the lifecycle's Wait,
	// and to Remove. Wait lets the stderr copy finish, within a bound: a
	// process of the client's may still hold the pipe.
	exited := make(chan struct{})
	var werr error
	wait := st.Wait
	go func() {
		werr = wait()
		select {
		case <-read:
		case <-time.After(2 * time.Second):
		}
		close(exited)
	}()
	st.Wait = func() error { <-exited; return werr }
	e.mu.Lock()
	if e.runs == nil {
		e.runs = map[string]*runEnd{}
	}
	e.runs[b.Name] = &runEnd{exited: exited, read: read, err: &werr, stderr: gate, dir: dir}
	e.mu.Unlock()

	created := func() error {
		there := func() bool {
			if _, err := os.Stat(cid); err != nil {
				return false
			}
			gate.release()
			go dropRunDir(dir)
			return true
		}
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if there() {
				return nil
			}
			select {
			case <-exited:
				if there() {
					return nil
				}
				os.RemoveAll(dir)
				// Nothing was created: say why in one line.
				why := gate.drop()
				if err := e.CheckImage(ctx, b.Image); err != nil {
					return err
				}
				if why == "" {
					why = fmt.Sprintf("%s run: %v", e.Kind, werr)
				}
				return exitcode.Setup("create box %s: %s", b.Name, why)
			case <-ctx.Done():
				gate.release()
				os.RemoveAll(dir)
				return exitcode.Setup("create box %s: %w", b.Name, ctx.Err())
			case <-t.C:
			}
		}
	}
	return st, created, nil
}

// runDirPattern is os.MkdirTemp's pattern for box b's cidfile folder,
// named after the box so that whoever removes the box can find it: the
// folder outlives a supervisor SIGKILLed while podman creates the box
// (dropRunDir removes it otherwise), and Remove (the lifecycle's, or
// reconcile's) drops it (dropRunDirs).
func runDirPattern(b *supervisor.Box) string { return "dw-run-" + b.Name + "-*" }

// dropRunDir removes a one-step run's cidfile folder dir once podman
// wrote the box's id into it (it writes the id right after making the
// file), so that the folder is left only by a supervisor killed while
// podman creates the box.
func dropRunDir(dir string) {
	for range 100 {
		raw, _ := os.ReadFile(filepath.Join(dir, "cid"))
		if containerID(strings.TrimSpace(string(raw))) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	os.RemoveAll(dir)
}

// containerID reports whether s is a full container id: 64 hex digits.
func containerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// runEnd is how a one-step run's client ended, for Remove.
type runEnd struct {
	exited chan struct{} // closed once the client has exited
	read   chan struct{} // closed once its stderr reached EOF
	err    *error        // its Wait's error, once exited is closed
	stderr *heldWriter   // its stderr
	dir    string        // its cidfile folder
}

// removed reports whether the client's end proves the box removed:
// `podman run --rm` removes the box after it exits and before the
// client does (or finds it removed by conmon's cleanup), and says on
// stderr when a removal fails, as it does when it fails to start the
// box (whose forced removal it does not check). So a client that
// exited by itself once the box existed, with all its stderr read and
// nothing ever said on it, removed the box. A client still running,
// killed, whose stderr is still held open, or that said anything at all
// (even before the box existed: the cidfile is polled, so a word right
// after it cannot be told from one before) leaves the proof to the
// listing.
func (r *runEnd) removed() bool {
	if r == nil {
		return false
	}
	for _, c := range []chan struct{}{r.exited, r.read} {
		select {
		case <-c:
		default:
			return false
		}
	}
	var xe *exec.ExitError
	if err := *r.err; err != nil && !(errors.As(err, &xe) && xe.Exited()) {
		return false
	}
	return r.stderr.silent()
}

// takeRun is box b's one-step run of this process (nil for none: the
// API serves, or reconcile removes a box another process ran), and
// forgets it.
func (e *Engine) takeRun(b *supervisor.Box) *runEnd {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.runs[b.Name]
	delete(e.runs, b.Name)
	return r
}

// dropDir removes box b's cidfile folder once the box is gone: the run's
// own, which this process made and so knows, else every folder of the
// box's name (dropRunDirs), which reads the whole temporary folder.
func (r *runEnd) dropDir(b *supervisor.Box) {
	if r != nil && r.dir != "" {
		os.RemoveAll(r.dir)
		return
	}
	dropRunDirs(b)
}

// heldWriter holds what is written until release (then passes it on,
// and everything after) or drop (then discards it).
type heldWriter struct {
	mu       sync.Mutex
	w        io.Writer // nil: discard
	held     bytes.Buffer
	released bool
	dropped  bool
	written  int // bytes written, held or not
}

// heldMax bounds what is held; the rest is lost.
const heldMax = 64 << 10

func (h *heldWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.written += len(p)
	switch {
	case h.released && h.w != nil:
		return h.w.Write(p)
	case h.released || h.dropped:
		return len(p), nil
	}
	if n := heldMax - h.held.Len(); n > 0 {
		h.held.Write(p[:min(n, len(p))])
	}
	return len(p), nil
}

// release passes on what was held, and lets everything after through.
func (h *heldWriter) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released || h.dropped {
		return
	}
	h.released = true
	if h.w != nil && h.held.Len() > 0 {
		h.w.Write(h.held.Bytes())
	}
	h.held.Reset()
}

// drop discards what was held and what comes after, and returns its
// first line.
func (h *heldWriter) drop() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return ""
	}
	h.dropped = true
	first := firstline.Of(h.held.String())
	h.held.Reset()
	return first
}

// silent reports whether release came and nothing was ever written.
func (h *heldWriter) silent() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.released && h.written == 0
}
