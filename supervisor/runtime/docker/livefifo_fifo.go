//go:build linux

package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/livepipe"
	"deathwatch/supervisor/trusted"
)

// LiveRoot is the folder of a root supervisor's live FIFOs' folders: a
// root-only folder of its run directory.
const LiveRoot = "/run/deathwatch/live"

// LiveRootFor is the folder of the live FIFOs' folders of a supervisor
// running as euid: LiveRoot as root, else deathwatch/live below the
// user's runtime folder runtimeDir ($XDG_RUNTIME_DIR: the user's own,
// cleared at boot, and where a rootless daemon of the user keeps its
// socket, so it can bind what is below it); "" for none (no absolute
// runtimeDir).
func LiveRootFor(euid int, runtimeDir string) string {
	switch {
	case euid == 0:
		return LiveRoot
	case filepath.IsAbs(runtimeDir):
		return filepath.Join(runtimeDir, "deathwatch", "live")
	}
	return ""
}

// liveRoot is this supervisor's LiveRootFor.
func liveRoot() string { return LiveRootFor(os.Geteuid(), os.Getenv("XDG_RUNTIME_DIR")) }

// liveFIFO is one box's live FIFO as the supervisor holds it.
type liveFIFO struct {
	dir string
	// The only write end; its close is the watcher's EOF. Once the
	// nonce is written it lives on a thread of its own (holdApart) and
	// release closes it; w is nil then.
	w       *os.File
	release func()
	// pass is a one-step run's live pipe's read end until its client
	// holds it (livefd_linux.go); dir is "" then.
	pass *os.File
}

// Arm gives the launch a live FIFO where it is safe and proven
// (supervisor.LaunchHooks, before Create): an agent that is not root,
// the host's watcher (it knows the spec field), an engine whose boxes'
// root is the supervisor's own uid (LiveKey, LiveIDs: root for a
// rootful engine, the user for the user's rootless one; the FIFO is
// then owned by an id no agent runs as) and a bind proof for this
// engine. Anything else leaves the launch as it was: the control
// stream alone.
func (e *Engine) Arm(ctx context.Context, b *supervisor.Box, s *shared.Spec) {
	if s.AllowRoot || b.WatcherInImage != "" {
		return
	}
	if e.oneStepLocal(ctx) {
		e.armPipe(b)
		return
	}
	if e.ProveBind == nil {
		return
	}
	key, ok := e.LiveKey(ctx)
	if !ok {
		return
	}
	root, err := liveRootDir()
	if err != nil {
		e.log().Debug("no live FIFO", "err", err)
		return
	}
	if !e.liveProven(ctx, root, key) {
		return
	}
	lf, err := makeLiveFIFO(root, b.Name, b.Nonce)
	if err != nil {
		e.log().Warn("no live FIFO", "box", b.Name, "err", err)
		return
	}
	e.mu.Lock()
	if e.lives == nil {
		e.lives = map[string]*liveFIFO{}
	}
	e.lives[b.Name] = lf
	e.mu.Unlock()
	s.LiveFIFO = LiveDirInBox + "/" + LiveFIFOName
}

// live is box's live FIFO, nil for none.
func (e *Engine) live(box string) *liveFIFO {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lives[box]
}

// liveDir is the host folder of box's live FIFO, to bind-mount
// read-only at LiveDirInBox; "" for none.
func (e *Engine) liveDir(box string) string {
	if lf := e.live(box); lf != nil {
		return lf.dir
	}
	return ""
}

// Ready notes the box's PID 1 (Pin) and deletes its live FIFO's name:
// the watcher opened the FIFO before the agent started.
func (e *Engine) Ready(ctx context.Context, b *supervisor.Box) {
	e.live(b.Name).unlink()
	go e.Pin(ctx, b)
}

// Release drops the write end of box's live FIFO once the engine client
// is let go: the watcher's read reaches EOF.
func (e *Engine) Release(b *supervisor.Box) { e.live(b.Name).close() }

// dropLive deletes box's live FIFO folder once the box is removed; a
// supervisor killed before that leaves the folder to Sweep.
func (e *Engine) dropLive(b *supervisor.Box) {
	e.mu.Lock()
	lf := e.lives[b.Name]
	delete(e.lives, b.Name)
	e.mu.Unlock()
	lf.close()
	lf.remove()
}

// Sweep removes what a crashed launch of box left beside the box
// (reconcile.Sweeper): its live FIFO's folder and the
// probe folders of bind proofs killed midway. It asks the engine
// nothing: reconcile calls it only once its List showed the box gone or
// it removed the box, so no second List nor Exists (idslot's) is due.
func (e *Engine) Sweep(b *supervisor.Box) {
	removeLiveDir(b.Name)
	dropStaleProbes(liveRoot())
}

// liveProven reads the engine's cached verdict, or proves it once: the
// engine keeps the box's ids, and a nonce file in a folder beside the
// FIFOs' reads back from inside a real box. A verdict is a file named
// for the engine's key, so a new engine (a new socket) is proven anew.
func (e *Engine) liveProven(ctx context.Context, root, key string) bool {
	sum := sha256.Sum256([]byte(key))
	name := hex.EncodeToString(sum[:12])
	yes, no := filepath.Join(root, ".proven-"+name), filepath.Join(root, ".refuted-"+name)
	switch {
	case ownedFile(yes):
		return true
	case ownedFile(no):
		// A refutation is kept for a while only: a proof that failed
		// for a passing reason (a box that could not start in time on a
		// loaded host) must not cost this engine its live FIFO until
		// the daemon restarts.
		if st, err := os.Lstat(no); err == nil && time.Since(st.ModTime()) < refutedFor {
			return false
		}
		os.Remove(no)
	}
	dropStaleProbes(root)
	verdict, detail := no, ""
	if keeps, err := e.LiveIDs(ctx); err != nil {
		e.log().Debug("no live FIFO", "engine", key, "err", err)
		return false
	} else if !keeps {
		detail = "the daemon remaps user ids: the box's root cannot open a FIFO of the host's root"
	} else if dir, err := os.MkdirTemp(root, "probe-"); err != nil {
		detail = err.Error()
	} else {
		var ok bool
		ok, detail = e.ProveBind(ctx, e.Kind, dir)
		os.RemoveAll(dir)
		if ok {
			verdict = yes
		}
	}
	e.log().Info("live FIFO bind proof", "engine", key, "proven", verdict == yes, "detail", detail)
	if f, err := os.OpenFile(verdict, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600); err == nil {
		fmt.Fprintln(f, detail)
		f.Close()
	}
	return verdict == yes
}

// refutedFor is how long a failed bind proof stands before a launch
// proves the engine again.
const refutedFor = 10 * time.Minute

// dropStaleProbes removes the probe folders of proofs that ended
// without removing theirs (a supervisor killed mid-proof): a proof
// gives up within a minute (hostcheck's probe timeout), so a folder of
// ours older than ten is no live proof's.
func dropStaleProbes(root string) {
	if root == "" {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "probe-*"))
	for _, d := range dirs {
		st, err := os.Lstat(d)
		if err != nil || !st.IsDir() || time.Since(st.ModTime()) < 10*time.Minute {
			continue
		}
		if s, ok := st.Sys().(*syscall.Stat_t); ok && int(s.Uid) == os.Geteuid() {
			os.RemoveAll(d)
		}
	}
}

// liveRootDir makes liveRoot (and its parents, 0700) if need be and
// checks that it is the supervisor's own, writable by no one else, with
// no link on its path (trusted.EnsureDir).
func liveRootDir() (string, error) {
	root := liveRoot()
	if root == "" {
		return "", errors.New("no folder for live FIFOs: set XDG_RUNTIME_DIR")
	}
	if err := trusted.EnsureDir(root); err != nil {
		return "", err
	}
	return root, nil
}

// ownedFile reports whether p is a regular file of the supervisor's own
// (not a link).
func ownedFile(p string) bool {
	st, err := os.Lstat(p)
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	s, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(s.Uid) == os.Geteuid()
}

// makeLiveFIFO makes box's folder (fresh, 0700) under root and the FIFO
// in it (0600), opens it and writes nonce into it. The open is O_RDWR,
// which on Linux never blocks on a FIFO (fifo(7)), where O_WRONLY would
// wait for a reader that may never come and O_WRONLY|O_NONBLOCK fails
// without one; the supervisor's own read end changes nothing for the
// watcher, which sees EOF once no write end is left. Every step works
// on descriptors, following no link (root's own path included:
// RESOLVE_NO_SYMLINKS).
func makeLiveFIFO(root, box, nonce string) (*liveFIFO, error) {
	if box == "" || box != filepath.Base(box) || box[0] == '.' {
		return nil, fmt.Errorf("live FIFO: bad box name %q", box)
	}
	rfd, err := unix.Openat2(unix.AT_FDCWD, root, &unix.OpenHow{
		Flags:   unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_RDONLY,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	dir := filepath.Join(root, box)
	if err := unix.Mkdirat(rfd, box, 0o700); err != nil {
		return nil, &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	lf := &liveFIFO{dir: dir}
	fail := func(op string, err error) (*liveFIFO, error) {
		lf.remove()
		return nil, &os.PathError{Op: op, Path: filepath.Join(dir, LiveFIFOName), Err: err}
	}
	dfd, err := unix.Openat(rfd, box, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_RDONLY, 0)
	if err != nil {
		return fail("open", err)
	}
	defer unix.Close(dfd)
	if err := unix.Mkfifoat(dfd, LiveFIFOName, 0o600); err != nil {
		return fail("mkfifo", err)
	}
	fd, err := unix.Openat(dfd, LiveFIFOName, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open", err)
	}
	lf.w = os.NewFile(uintptr(fd), filepath.Join(dir, LiveFIFOName))
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		lf.close()
		return fail("check", errors.New("not a FIFO of the supervisor's own, mode 0600"))
	}
	if _, err := lf.w.WriteString(nonce); err != nil {
		lf.close()
		return fail("write", err)
	}
	lf.release, lf.w = livepipe.Hold(lf.w), nil
	return lf, nil
}

// close drops the write end: the watcher's read reaches EOF.
func (lf *liveFIFO) close() {
	if lf == nil {
		return
	}
	if lf.w != nil {
		lf.w.Close()
		lf.w = nil
	}
	if lf.pass != nil {
		lf.pass.Close()
		lf.pass = nil
	}
	if lf.release != nil {
		lf.release()
		lf.release = nil
	}
}

// unlink deletes the FIFO's name at ready, once the watcher holds it
// open (the pipe lives on in the two ends): nothing on the host can open
// it from then on. The folder stays, empty and 0700, as long as the box:
// it is the source of the box's bind, and an engine binds every source
// again for each request on the box's files (Docker's archive endpoint:
// docker cp, a copy-out), which fails whole on a source that is gone.
func (lf *liveFIFO) unlink() {
	if lf != nil && lf.dir != "" {
		os.Remove(filepath.Join(lf.dir, LiveFIFOName))
	}
}

// remove deletes the FIFO's folder (os.RemoveAll follows no link).
func (lf *liveFIFO) remove() {
	if lf != nil && lf.dir != "" {
		os.RemoveAll(lf.dir)
	}
}

// removeLiveDir deletes box's live FIFO folder, if any, for reconcile:
// only a real folder of the supervisor's own under liveRoot.
func removeLiveDir(box string) {
	root := liveRoot()
	if root == "" || box == "" || box != filepath.Base(box) || box[0] == '.' {
		return
	}
	dir := filepath.Join(root, box)
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok && int(s.Uid) == os.Geteuid() {
		os.RemoveAll(dir)
	}
}
