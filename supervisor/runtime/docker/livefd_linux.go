package docker

import (
	"context"
	"os"

	"deathwatch/supervisor"
	"deathwatch/supervisor/livepipe"
)

// The live pipe of a local Podman's one-step run (run.go): the same
// early alarm as Docker's live FIFO, without a path, a bind or a proof.
// The podman client is the supervisor's own child, so it can hand the
// box the read end of a pipe (--preserve-fds: conmon passes the client's
// descriptors 3.. to the box's PID 1 at the same numbers) whose write
// end the supervisor alone holds, apart (livepipe.Hold). The watcher
// takes it as --live-fd, as the native runtime's; it marks it
// close-on-exec before the agent exists. The box's user namespace
// (--userns=auto) changes nothing: no uid has to open anything.

// oneStepLocal reports whether the box is started by a local podman's
// one-step `podman run` (OneStep's yes), which can pass it a descriptor.
func (e *Engine) oneStepLocal(ctx context.Context) bool {
	return e.Kind == "podman" && !e.podmanRemote() && e.client(ctx) == nil
}

// armPipe gives box b of a one-step run its live pipe: the read end
// waits in the box's liveFIFO for CreateStart to pass it to the client.
func (e *Engine) armPipe(b *supervisor.Box) {
	r, w, err := os.Pipe()
	if err != nil {
		e.log().Warn("no live pipe", "box", b.Name, "err", err)
		return
	}
	lf := &liveFIFO{pass: r, release: livepipe.Hold(w)}
	e.mu.Lock()
	if e.lives == nil {
		e.lives = map[string]*liveFIFO{}
	}
	e.lives[b.Name] = lf
	e.mu.Unlock()
}

// livePass is the read end of box's live pipe that its client is to
// pass on (nil for none), and the function that drops the supervisor's
// copy once the client has its own.
func (e *Engine) livePass(box string) (*os.File, func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	lf := e.lives[box]
	if lf == nil || lf.pass == nil {
		return nil, func() {}
	}
	r := lf.pass
	return r, func() {
		e.mu.Lock()
		if lf.pass == r {
			lf.pass = nil
		}
		e.mu.Unlock()
		r.Close()
	}
}
