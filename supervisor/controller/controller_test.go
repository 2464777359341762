package controller

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"deathwatch/supervisor/proc"
)

func TestParentVerdict(t *testing.T) {
	for _, c := range []struct {
		name       string
		start, now int
		openErr    error
		gone, fail bool
	}{
		{"the parent, still ours", 42, 42, nil, false, false},
		{"init at start: the starter exited before us", 1, 1, nil, true, true},
		{"no parent pid", 0, 0, nil, true, true},
		{"exited before the handle", 42, 1, unix.ESRCH, true, true},
		{"exited after the handle: reparented to init", 42, 1, nil, true, true},
		{"exited after the handle: reparented to a subreaper", 42, 7, nil, true, true},
		{"handle failed otherwise", 42, 42, unix.EMFILE, false, true},
	} {
		err := parentVerdict(c.start, c.now, c.openErr)
		if (err != nil) != c.fail || errors.Is(err, ErrGone) != c.gone {
			t.Errorf("%s: parentVerdict(%d, %d, %v) = %v; want fail %v, gone %v", c.name, c.start, c.now, c.openErr, err, c.fail, c.gone)
		}
	}
}

func TestStartVerdict(t *testing.T) {
	for _, c := range []struct {
		name       string
		want, got  uint64
		err        error
		gone, fail bool
	}{
		{"any start time", 0, 5, nil, false, false},
		{"the start time asked for", 5, 5, nil, false, false},
		{"a reused pid", 5, 9, nil, true, true},
		{"no such process", 5, 0, unix.ESRCH, true, true},
		{"unreadable", 5, 0, unix.EACCES, false, true},
	} {
		err := startVerdict(42, c.want, c.got, c.err)
		if (err != nil) != c.fail || errors.Is(err, ErrGone) != c.gone {
			t.Errorf("%s: startVerdict = %v; want fail %v, gone %v", c.name, err, c.fail, c.gone)
		}
	}
}

// lostWithin fails unless w's Lost closes within d.
func lostWithin(t *testing.T, w *Watch, d time.Duration) {
	t.Helper()
	select {
	case <-w.Lost():
		t.Logf("lost: %s", w.Why())
	case <-time.After(d):
		t.Fatalf("%s: Lost not closed after %v", w.Describe(), d)
	}
}

func notLost(t *testing.T, w *Watch, d time.Duration) {
	t.Helper()
	select {
	case <-w.Lost():
		t.Fatalf("%s: lost although the controller lives: %s", w.Describe(), w.Why())
	case <-time.After(d):
	}
}

func TestWatchFD(t *testing.T) {
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := Take(Spec{FD: int(r.Fd()), HasFD: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	hooked := make(chan struct{})
	w.OnLost(func() { close(hooked) })
	wr.Write([]byte("data is not EOF\n"))
	notLost(t, w, 200*time.Millisecond)
	wr.Close()
	lostWithin(t, w, 10*time.Second)
	select {
	case <-hooked:
	default:
		t.Fatal("Lost closed before the OnLost hook ran")
	}
	late := false
	w.OnLost(func() { late = true })
	if !late {
		t.Fatal("an OnLost hook registered after the loss did not run at once")
	}
}

func TestWatchFDNotOpen(t *testing.T) {
	if _, err := Take(Spec{FD: 987, HasFD: true}); err == nil || errors.Is(err, ErrGone) {
		t.Fatalf("Take of a closed descriptor: %v; want an error that is not ErrGone", err)
	}
}

func TestWatchPID(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	st, err := proc.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Take(Spec{PID: cmd.Process.Pid, StartTime: st + 1}); !errors.Is(err, ErrGone) {
		t.Fatalf("Take with another start time: %v; want ErrGone (a reused pid)", err)
	}
	w, err := Take(Spec{PID: cmd.Process.Pid, StartTime: st})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.StartTime != st {
		t.Errorf("StartTime %d, want %d", w.StartTime, st)
	}
	notLost(t, w, 200*time.Millisecond)
	cmd.Process.Kill()
	lostWithin(t, w, 10*time.Second)
	cmd.Wait()
	if _, err := Take(Spec{PID: cmd.Process.Pid}); !errors.Is(err, ErrGone) {
		t.Fatalf("Take of a reaped pid: %v; want ErrGone", err)
	}
}

func TestWatchParentLives(t *testing.T) {
	w, err := Take(Spec{Parent: true})
	if err != nil {
		t.Fatal(err)
	}
	if w.PID != os.Getppid() || w.Link != Supported() {
		t.Errorf("watch %s (link %s), want parent pid %d by %s", w.Describe(), w.Link, os.Getppid(), Supported())
	}
	notLost(t, w, 200*time.Millisecond)
	w.Close()
}

func TestZeroSpecWatchesNothing(t *testing.T) {
	w, err := Take(Spec{})
	if w != nil || err != nil {
		t.Fatalf("Take(Spec{}) = %v, %v; want nil, nil", w, err)
	}
	if w.Lost() != nil {
		t.Fatal("a nil Watch's Lost must block for ever (nil channel)")
	}
}

func TestDetachedRecordsParent(t *testing.T) {
	w, err := Take(Spec{Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	if w.Link != LinkDetached || w.PID != os.Getppid() || w.StartTime == 0 {
		t.Fatalf("detached watch %+v: want link detached, the parent's pid and start time", w)
	}
	notLost(t, w, 50*time.Millisecond)
}
