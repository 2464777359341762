package watcher

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dial connects to the socket at p as a client would (the relay).
func dial(t *testing.T, p string) int {
	t.Helper()
	fd, err := relayConnect(p, time.Now().Add(5*time.Second))
	if err != nil {
		t.Errorf("connect %s: %v", p, err)
		return -1
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// TestAcceptControlOne: one connection is taken, its peer is this
// process, and the socket and its folder are gone at once: a second
// client finds nothing to connect to.
func TestAcceptControlOne(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ctl", "control.sock")
	go dial(t, p)
	c, peer, err := acceptControl(p, time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatalf("acceptControl: %v", err)
	}
	defer unix.Close(c)
	if peer != os.Getpid() {
		t.Errorf("peer pid %d, want %d", peer, os.Getpid())
	}
	if _, err := os.Lstat(filepath.Dir(p)); !os.IsNotExist(err) {
		t.Errorf("the socket's folder is still there after the accept: %v", err)
	}
	fd, _ := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	defer unix.Close(fd)
	if err := sockCall(unix.SYS_CONNECT, fd, p); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("a second connect: %v, want ENOENT", err)
	}
}

// TestAcceptControlSecondWaiting: two clients already waiting are a
// refusal of both.
func TestAcceptControlSecondWaiting(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ctl", "control.sock")
	ready := make(chan struct{})
	go func() {
		// Both connect before the listener is polled: the backlog
		// holds them.
		for !exists(p) {
			time.Sleep(time.Millisecond)
		}
		dial(t, p)
		dial(t, p)
		close(ready)
	}()
	// Let the clients queue before the accept.
	until := time.Now().Add(5 * time.Second)
	errc := make(chan error, 1)
	go func() {
		<-ready
		errc <- nil
	}()
	_, _, err := acceptTwoQueued(t, p, until, errc)
	if err == nil || !strings.Contains(err.Error(), "second connection") {
		t.Fatalf("acceptControl with two clients: %v, want a refusal", err)
	}
}

// acceptTwoQueued runs acceptControl once both clients have queued.
func acceptTwoQueued(t *testing.T, p string, until time.Time, queued <-chan error) (int, int, error) {
	t.Helper()
	saved := waitHook
	waitHook = func() { <-queued }
	defer func() { waitHook = saved }()
	return acceptControl(p, until)
}

// TestAcceptControlFolderExists: a folder someone made first is refused.
func TestAcceptControlFolderExists(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ctl")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := acceptControl(filepath.Join(dir, "control.sock"), time.Now().Add(time.Second)); err == nil || !strings.Contains(err.Error(), "must not exist") {
		t.Fatalf("acceptControl in a folder that exists: %v", err)
	}
}

// TestAcceptControlTimeout: nobody connects.
func TestAcceptControlTimeout(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ctl", "control.sock")
	if _, _, err := acceptControl(p, time.Now().Add(50*time.Millisecond)); err == nil || !strings.Contains(err.Error(), "no connection") {
		t.Fatalf("acceptControl with no client: %v", err)
	}
	if exists(filepath.Dir(p)) {
		t.Errorf("the socket's folder is left behind")
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }
