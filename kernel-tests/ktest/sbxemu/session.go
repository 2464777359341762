package main

// Exec sessions: each `sbx exec` registers the pid that carries it, so
// that a sandbox with none stops by itself after mode.idleStop (the
// product's auto-stop), and the lost-EOF exec (mode.eofLost).

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// addSession records pid as a live exec session of the sandbox.
func (e *emu) addSession(name string, pid int) error {
	dir := e.path("sessions", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, strconv.Itoa(pid)), nil, 0o600)
}

// hasSessions reports whether a session of the sandbox is alive, and
// forgets the ones that are not.
func (e *emu) hasSessions(name string) bool {
	ms, _ := filepath.Glob(filepath.Join(e.path("sessions", name), "*"))
	live := false
	for _, m := range ms {
		pid, _ := strconv.Atoi(filepath.Base(m))
		if pid > 0 && processAlive(pid) {
			live = true
			continue
		}
		os.Remove(m)
	}
	return live
}

func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(st), ") Z ")
}

// execLost runs the docker exec so that the end of this client never
// reaches the process in the sandbox: the docker client runs in a
// session of its own with its stdin on a pipe that a detached holder
// (`sbxemu __hold`) keeps open, and the holder drains its output once
// this client is gone. This client relays stdin (never closing the
// pipe) and the output, and exits with the exec's status.
func (e *emu) execLost(name string, argv []string) (int, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return 1, err
	}
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	lifeR, lifeW, _ := os.Pipe()
	d := exec.Command(argv[0], argv[1:]...)
	d.Stdin, d.Stdout, d.Stderr = inR, outW, errW
	d.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := d.Start(); err != nil {
		return 1, err
	}
	inR.Close()
	outW.Close()
	errW.Close()
	self, err := os.Executable()
	if err != nil {
		return 1, err
	}
	h := exec.Command(self, "__hold")
	h.ExtraFiles = []*os.File{inW, outR, errR, lifeR}
	h.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := h.Start(); err != nil {
		return 1, err
	}
	_ = h.Process.Release()
	lifeR.Close()
	defer lifeW.Close()
	if err := e.addSession(name, d.Process.Pid); err != nil {
		return 1, err
	}
	go func() { _, _ = io.Copy(inW, os.Stdin) }() // the end of stdin goes nowhere
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { _, _ = io.Copy(os.Stdout, outR); wg.Done() }()
	go func() { _, _ = io.Copy(os.Stderr, errR); wg.Done() }()
	wg.Wait()
	_ = d.Wait()
	if c := d.ProcessState.ExitCode(); c >= 0 {
		return c, nil
	}
	return 1, nil
}

// holdMain is `__hold` with fds 3 (the exec's stdin, held open), 4 and
// 5 (its stdout and stderr) and 6 (its client's life): once the client
// is gone it drains the output, so that the exec never blocks on it,
// until the exec ends.
func holdMain() int {
	in, out, errf, life := os.NewFile(3, "stdin"), os.NewFile(4, "stdout"), os.NewFile(5, "stderr"), os.NewFile(6, "life")
	_, _ = io.Copy(io.Discard, life)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { _, _ = io.Copy(io.Discard, out); wg.Done() }()
	go func() { _, _ = io.Copy(io.Discard, errf); wg.Done() }()
	wg.Wait()
	in.Close()
	return 0
}

// idleStop stops the sandbox when no exec session has been alive for
// mode.idleStop; it reports whether it did (the forwarder then ends).
func (f *forwarder) idleStop(lastBusy *time.Time) bool {
	idle := f.e.mode.idleStop
	if idle <= 0 {
		return false
	}
	if f.e.hasSessions(f.name) {
		*lastBusy = time.Now()
		return false
	}
	if time.Since(*lastBusy) < idle {
		return false
	}
	unlock := f.e.lock()
	defer unlock()
	if f.e.hasSessions(f.name) {
		*lastBusy = time.Now()
		return false
	}
	f.logger.Printf("no exec session for %v; stopping the sandbox", idle)
	if _, err := docker("stop", "--time", "1", containerName(f.name)); err != nil {
		f.logger.Print(err)
	}
	os.Remove(f.e.path("fwd", f.name+".pid"))
	os.Remove(f.e.sockPath(f.name))
	return true
}

// sockPath is the forwarder's control socket: named by a hash of the
// sandbox, so that the path stays within a unix socket's 108 bytes.
func (e *emu) sockPath(name string) string {
	h := sha256.Sum256([]byte(name))
	return e.path("fwd", hex.EncodeToString(h[:6])+".sock")
}
