package watcher

import (
	"errors"
	"syscall"
	"time"
)

// reap is the one waiter: nothing else in the watcher calls wait4. It
// drains every exited child (signals merge, so one SIGCHLD may stand
// for many), notes the main agent's status when it passes by, and
// reports whether no child is left at all.
func (w *watcher) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ECHILD):
			w.empty = true
			return
		case err != nil || pid <= 0:
			return
		}
		if pid == w.mainPid && !w.mainDone {
			w.mainDone = true
			w.status = ws
			w.ended = time.Now()
			switch e := w.killedOn.Load(); {
			case w.ending:
			case e != nil:
				w.lost(streamError(*e))
			default:
				w.beginEnd(w.endReason(ws), -1, w.grace)
			}
		}
	}
}

// killAll signals every process of the box. Only PID 1 of a PID
// namespace may do this: kill(-1) reaches exactly the namespace.
func killAll(sig syscall.Signal) {
	if syscall.Getpid() != 1 {
		panic("watcher: killAll outside PID 1 of a PID namespace")
	}
	if p := relayPID.Load(); p > 0 {
		killAllBut(sig, int(p))
		return
	}
	_ = syscall.Kill(-1, sig)
}
