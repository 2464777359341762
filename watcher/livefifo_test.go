package watcher

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const testNonce = "0123456789abcdef"

// liveFIFO makes a FIFO in a fresh folder and, when hold, opens it the
// way the supervisor does (O_RDWR: never blocks) and writes nonce.
func liveFIFO(t *testing.T, hold bool, nonce string) (string, *os.File) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "live")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if !hold {
		return p, nil
	}
	wr, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wr.Close() })
	if _, err := wr.WriteString(nonce); err != nil {
		t.Fatal(err)
	}
	return p, wr
}

// The supervisor closing its end (its death) reaches the loop as a
// stream error, which handleFrame treats as the control stream's EOF: a
// liveness loss.
func TestLiveFIFOEOFIsALivenessLoss(t *testing.T) {
	p, wr := liveFIFO(t, true, testNonce)
	f, err := openLive(p, testNonce)
	if err != nil {
		t.Fatal(err)
	}
	expectLiveEOF(t, f, wr)
}

// expectLiveEOF watches f (the read end) and closes wr (the write
// end): the loop must hear the live FIFO's end, a liveness loss.
func expectLiveEOF(t *testing.T, f, wr *os.File) {
	t.Helper()
	w := &watcher{frames: make(chan frameEvent, 1)} // agentUp false: nothing is killed
	go w.watchLive(f)
	wr.Close()
	select {
	case ev := <-w.frames:
		if !errors.Is(ev.err, errLiveEOF) || !strings.Contains(streamError(ev.err), "live FIFO") {
			t.Fatalf("event %+v, want the live FIFO's EOF", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event after the writer closed the live FIFO")
	}
}

// A FIFO no supervisor holds, one without this launch's nonce, a link
// to a FIFO, a regular file, a missing path: all refused (fail closed).
func TestLiveFIFORefusals(t *testing.T) {
	never, _ := liveFIFO(t, false, "")
	other, _ := liveFIFO(t, true, "fedcba9876543210")
	held, _ := liveFIFO(t, true, testNonce)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(held, link); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte(testNonce), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ path, want string }{
		"never opened by the supervisor": {never, "no writer"},
		"another launch's nonce":         {other, "nonce"},
		"a symlink":                      {link, "too many levels"},
		"a regular file":                 {plain, "not a FIFO"},
		"missing":                        {filepath.Join(t.TempDir(), "none"), "no such file"},
	} {
		t.Run(name, func(t *testing.T) {
			f, err := openLive(c.path, testNonce)
			if err == nil {
				f.Close()
				t.Fatalf("openLive(%s) succeeded, want a refusal", c.path)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("openLive(%s) = %v, want it to mention %q", c.path, err, c.want)
			}
		})
	}
}

// The native runtime's live pipe (--live-fd): its writer's close is the
// same liveness loss; anything but a pipe is refused (fail closed).
func TestInheritedLive(t *testing.T) {
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	f, err := inheritedLive(fd)
	if err != nil {
		t.Fatal(err)
	}
	expectLiveEOF(t, f, wr)
	reg, err := os.Create(filepath.Join(t.TempDir(), "file"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if _, err := inheritedLive(int(reg.Fd())); err == nil || !strings.Contains(err.Error(), "not a pipe") {
		t.Errorf("a regular file as --live-fd: %v, want a refusal", err)
	}
	if _, err := inheritedLive(987); err == nil {
		t.Error("a closed descriptor as --live-fd: want a refusal")
	}
}
