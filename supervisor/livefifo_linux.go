package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
}

// armLive gives the launch a live FIFO where it is safe and proven:
// an agent that is not root, the host's watcher (it knows the spec
// field), a runtime that binds it and whose boxes' root is the
// supervisor's own uid (LiveBinder: root for a rootful engine, the
// user for the user's rootless one; the FIFO is then owned by an id no
// agent runs as) and a bind proof for this engine. Anything else leaves
// the launch as it was: the control stream alone.
func (l *launch) armLive(ctx context.Context) {
	lb, ok := l.rt.(LiveBinder)
	if !ok || l.x.ProveBind == nil || l.spec.AllowRoot || l.box.WatcherInImage != "" {
		return
	}
	key, ok := lb.LiveKey(ctx)
	if !ok {
		return
	}
	root, err := liveRootDir()
	if err != nil {
		l.x.Log.Debug("no live FIFO", "err", err)
		return
	}
	if !l.liveProven(ctx, lb, root, key) {
		return
	}
	lf, err := makeLiveFIFO(root, l.box.Name, l.box.Nonce)
	if err != nil {
		l.x.Log.Warn("no live FIFO", "box", l.box.Name, "err", err)
		return
	}
	l.live = lf
	l.box.LiveDir = lf.dir
	l.spec.LiveFIFO = LiveDirInBox + "/" + LiveFIFOName
}

// liveProven reads the engine's cached verdict, or proves it once: the
// engine keeps the box's ids, and a nonce file in a folder beside the
// FIFOs' reads back from inside a real box. A verdict is a file named
// for the engine's key, so a new engine (a new socket) is proven anew.
func (l *launch) liveProven(ctx context.Context, lb LiveBinder, root, key string) bool {
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
	if keeps, err := lb.LiveIDs(ctx); err != nil {
		l.x.Log.Debug("no live FIFO", "engine", key, "err", err)
		return false
	} else if !keeps {
		detail = "the daemon remaps user ids: the box's root cannot open a FIFO of the host's root"
	} else if dir, err := os.MkdirTemp(root, "probe-"); err != nil {
		detail = err.Error()
	} else {
		var ok bool
		crashQuiet.Add(1)
		ok, detail = l.x.ProveBind(ctx, l.rt.Name(), dir)
		crashQuiet.Add(-1)
		os.RemoveAll(dir)
		if ok {
			verdict = yes
		}
	}
	l.x.Log.Info("live FIFO bind proof", "engine", key, "proven", verdict == yes, "detail", detail)
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
// no link on its path (EnsureTrustedDir).
func liveRootDir() (string, error) {
	root := liveRoot()
	if root == "" {
		return "", errors.New("no folder for live FIFOs: set XDG_RUNTIME_DIR")
	}
	if err := EnsureTrustedDir(root); err != nil {
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
	lf.release, lf.w = HoldLive(lf.w), nil
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
	if lf.release != nil {
		lf.release()
		lf.release = nil
	}
}

// HoldLive hands w, the write end of a box's live pipe (a runtime
// that passes the box its read end, as native does), to a thread of its
// own (holdApart) and returns the function that closes it. Where the
// kernel refuses, w stays open here and release closes it.
func HoldLive(w *os.File) (release func()) {
	if rel, err := holdApart(int(w.Fd())); err == nil {
		w.Close()
		return rel
	}
	return func() { w.Close() }
}

// holdApart keeps a copy of fd open on an OS thread of its own that
// does nothing else and has a file table of its own (unshare
// CLONE_FILES, every other descriptor closed in it), and returns the
// function that closes it there; the caller then closes its own copy.
//
// Why: a process's shared file table is closed by its last thread to
// exit, and in do_exit that thread first tears down the address space
// (exit_mm before exit_files). For the supervisor (11 MB resident, 8
// threads) that is milliseconds on a host where page-table changes are
// dear, and the box's alarm waited for all of it. A thread's own table
// is closed in that thread's exit, which follows the SIGKILL at once:
// the address space is torn down by whichever thread is last, and the
// watcher is already killing the agents by then, before the engine has
// seen the supervisor's connections close (TestBenchSupervisorKill
// prints how much earlier). The main thread as the holder, which the
// kernel wakes first on a group kill, is no better.
//
// The thread stays locked (runtime.LockOSThread, never unlocked), so
// the Go runtime never runs anything else on it and ends it when the
// goroutine returns. It is never the main thread: /proc/self/fd (read
// as the process's table, as by the podman database's open) shows the
// main thread's. release returns once the copy is closed. err: the
// kernel refused (no close_range before Linux 5.9); the caller keeps
// its own copy.
func holdApart(fd int) (release func(), err error) {
	held, rel := make(chan error), make(chan struct{})
	var serve func()
	serve = func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: /proc/self/fd shows its table, which must
			// stay the process's. Hand over to another thread (this one,
			// locked, can run nothing else meanwhile), then let go.
			moved := make(chan struct{})
			go func() { close(moved); serve() }()
			<-moved
			runtime.UnlockOSThread()
			return
		}
		err := unix.Unshare(unix.CLONE_FILES)
		if err == nil && fd > 0 {
			err = unix.CloseRange(0, uint(fd-1), 0)
		}
		if err == nil {
			err = unix.CloseRange(uint(fd+1), math.MaxUint32, 0)
		}
		held <- err
		if err != nil {
			// Returning while locked ends the thread and its table.
			return
		}
		<-rel
		unix.Close(fd)
		held <- nil
	}
	go serve()
	if err := <-held; err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(rel)
			<-held // closed: the watcher's read reaches EOF
		})
	}, nil
}

// unlink deletes the FIFO's name at ready, once the watcher holds it
// open (the pipe lives on in the two ends): nothing on the host can open
// it from then on. The folder stays, empty and 0700, as long as the box:
// it is the source of the box's bind, and an engine binds every source
// again for each request on the box's files (Docker's archive endpoint:
// docker cp, a copy-out), which fails whole on a source that is gone.
func (lf *liveFIFO) unlink() {
	if lf != nil {
		os.Remove(filepath.Join(lf.dir, LiveFIFOName))
	}
}

// remove deletes the FIFO's folder (os.RemoveAll follows no link) once
// the box is removed. A supervisor killed before that leaves the folder
// to reconcile.
func (lf *liveFIFO) remove() {
	if lf != nil {
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
