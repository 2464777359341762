package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"deathwatch/supervisor"
	procfs "deathwatch/supervisor/proc"
)

// pinnedInit is a box's PID 1 as the host saw it once the box was
// ready, and its parent (the engine's shim).
type pinnedInit struct {
	init, shim procfs.Proc
	shimName   string
}

// Pin notes the box's PID 1 when the supervisor could end it without
// the engine: a rootless daemon that listens as the supervisor's own uid
// runs its boxes in a user namespace that uid owns.
func (e *Engine) Pin(ctx context.Context, b *supervisor.Box) {
	c := e.client(ctx)
	if c == nil || !e.rootless || c.ep.Scheme != "unix" {
		return
	}
	if uid, _, ok := c.listener(); !ok || uid != os.Getuid() {
		return
	}
	pid, err := e.apiHostPID(ctx, c, b)
	if err != nil || pid <= 0 {
		return
	}
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return
	}
	p := pinnedInit{init: procfs.Proc{PID: pid, Start: st.Start}}
	if sh, err := procfs.ReadStat(st.PPID); err == nil {
		p.shim, p.shimName = procfs.Proc{PID: st.PPID, Start: sh.Start}, sh.Comm
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pins == nil {
		e.pins = map[string]pinnedInit{}
	}
	e.pins[b.Name] = p
}

// End kills the pinned PID 1 of the box (the kernel then kills every
// process of its PID namespace) through a pidfd taken while its start
// time still matched, and waits until it is gone. When the engine does
// not answer any more, it names the shim the box leaves behind.
func (e *Engine) End(b *supervisor.Box) (string, error) {
	e.mu.Lock()
	p, ok := e.pins[b.Name]
	e.mu.Unlock()
	if !ok {
		return "", nil
	}
	if p.init.Alive() {
		fd, err := unix.PidfdOpen(p.init.PID, 0)
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				return "", nil
			}
			return "", os.NewSyscallError("pidfd_open", err)
		}
		defer unix.Close(fd)
		if !p.init.Alive() { // the pid was reused before the pidfd
			return "", nil
		}
		if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return "", os.NewSyscallError("pidfd_send_signal", err)
		}
		if _, left := procfs.WaitDead([]procfs.Proc{p.init}, time.Now().Add(5*time.Second)); len(left) > 0 {
			return "", fmt.Errorf("box %s: its PID 1 (pid %d) did not die within 5s of SIGKILL", b.Name, p.init.PID)
		}
	}
	if p.shim.PID <= 1 || !p.shim.Exists() {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c := e.client(ctx); c != nil {
		if _, err := e.apiExists(ctx, c, b); err == nil {
			return "", nil // the engine answers: its removal goes on as usual
		}
	}
	return fmt.Sprintf("the %s engine does not answer; the box was ended without it, its shim %s (pid %d) is left: reconcile removes box %s once the engine is back", e.Kind, p.shimName, p.shim.PID, b.Name), nil
}
