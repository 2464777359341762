package supervisor

// The control stream loop: hello, spec, pings, the box's frames, signals.

import (
	"bufio"
	"context"
	"deathwatch/supervisor/journal"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"deathwatch/shared"
)

// attend speaks the control stream until the box ends, and returns the
// supervisor's exit status.
func (l *launch) attend(st *Started, log *slog.Logger) int {
	w := shared.NewWriter(st.Control)
	// The controller's loss closes the stream at once, from the watch's
	// goroutine: the watcher kills the box while this one is scheduled.
	l.ctrl.OnLost(func() { st.Control.Close() })
	done := make(chan struct{})
	defer close(done)
	ready := make(chan struct{})
	var in *input // the agent's input, when it takes any
	if l.spec.TTY || l.spec.Stdin {
		in = &input{}
	}
	if l.spec.TTY && l.x.Resize != nil {
		go resizes(l.x.Resize, ready, done, w, log)
	}
	// A party's work on the stream (an archive put) stops with it.
	pctx, cancelParties := context.WithCancel(l.ctx)
	defer cancelParties()

	// A blocked write (a box that never reads) must not block the loop
	// below, so the writes have a goroutine.
	go l.speak(pctx, w, done, log)

	res := make(chan readResult, 1)
	go l.read(st, w, in, ready, res, log)

	var (
		signals  = 0
		lastSig  os.Signal
		hard     <-chan time.Time
		deadline <-chan time.Time
		hardDone bool
		pastDue  bool
		ctrlLost bool
	)
	endNow := func(why string) {
		if hardDone {
			return
		}
		hardDone = true
		log.Info("ending the box at once", "why", why)
		st.Control.Close() // the watcher sees EOF and kills everything
		if l.hooks != nil {
			// Its live pipe or FIFO too: that EOF reaches the watcher at
			// once, where the stream's may travel through the engine.
			l.hooks.Release(l.box)
		}
		st.Kill()
	}
	if l.o.Deadline > 0 {
		// The watcher keeps the deadline; this is the host's backstop
		// for a box that cannot.
		deadline = time.After(l.o.Deadline + l.o.Grace + 10*time.Second)
	}
	var o readResult
wait:
	for {
		select {
		case o = <-res:
			break wait
		case s := <-l.x.Signals:
			if n, ok := forwarded(s); ok {
				log.Info("forwarding signal to the agent", "signal", s)
				go w.Send(shared.FrameSignal, shared.Signal{Number: n}.Marshal())
				continue
			}
			signals++
			lastSig = s
			if signals == 1 {
				log.Info("signal: stopping the agent", "signal", s, "grace", l.o.Grace)
				// Off the loop: a stream that does not drain must not keep
				// the second signal from being handled.
				go func() {
					if err := w.Send(shared.FrameStop, shared.Stop{Grace: l.o.Grace}.Marshal()); err != nil {
						log.Debug("send stop", "err", err)
					}
				}()
				hard = time.After(l.o.Grace + 5*time.Second)
			} else {
				endNow("second signal " + s.String())
			}
		case <-l.ctrl.Lost():
			ctrlLost = true
			endNow(l.ctrl.Why())
		case <-hard:
			endNow("the box did not stop within grace")
		case <-deadline:
			if l.partyBusy(10 * time.Second) {
				// A copy is moving (copy-in precedes the watcher's deadline,
				// copy-out follows it): the box is not past due while it does.
				deadline = time.After(10 * time.Second)
				continue
			}
			pastDue = true
			endNow("the box outlived its deadline")
		}
	}

	end := streamEnd{exit: o.exit, ready: o.ready, err: o.err, signal: lastSig, endedNow: hardDone, pastDue: pastDue}
	return l.conclude(end, ctrlLost, o.outErr, log)
}

// conclude turns how the stream ended into the launch's outcome: the
// controller's loss (ctrlLost, or a failed write of the agent's output),
// the box ended without the engine where the runtime can, the parties'
// verdicts, the exited event and the journal's exit record.
func (l *launch) conclude(end streamEnd, ctrlLost bool, outErr error, log *slog.Logger) int {
	if end.exit != nil {
		log.Info("exited", "reason", end.exit.Reason, "code", end.exit.Code, "runtime", end.exit.Runtime, "sweep", end.exit.Sweep)
	}
	switch {
	case ctrlLost:
		end.lost, end.lostWhy = shared.ReasonControllerLost, l.ctrl.Why()
	case outErr != nil:
		end.lost, end.lostWhy = shared.ReasonOutputLost, outErr.Error()
	}
	out := decide(end, l.o.Deadline, l.tail.Last())
	if en := l.hooks; en != nil && end.exit == nil && end.ready {
		// The stream ended without the watcher's word (the engine died
		// under the box?): end the box now rather than at its heartbeat.
		left, err := en.End(l.box)
		if err != nil {
			l.say("the box may still run: ending it without the engine failed: %v", err)
		} else if left != "" {
			l.say("%s", left)
		}
	}
	for _, p := range l.o.Parties {
		if v := p.End(end.exit != nil && end.ready); v != nil {
			out = outcome{code: v.Code, eventReason: string(v.Reason), journalReason: string(v.Reason), say: v.Say}
		}
	}
	if out.say != "" {
		l.failed(errors.New(out.say))
	}
	l.emit(Event{Event: EventExited, Code: ptr(out.code), Reason: out.eventReason})
	l.entry.Exit = &journal.Exit{Code: out.code, Reason: out.journalReason}
	return out.code
}

// partyFrame hands a frame the lifecycle does not own to the party it
// belongs to; one that no party takes is a protocol error.
func (l *launch) partyFrame(f shared.Frame) error {
	for _, p := range l.o.Parties {
		if handled, err := p.Frame(f); handled {
			return err
		}
	}
	return &shared.ProtocolError{Reason: "unexpected " + f.Type.String() + " frame from the box"}
}

// partyBusy reports whether a party moved data within d.
func (l *launch) partyBusy(d time.Duration) bool {
	for _, p := range l.o.Parties {
		if p.Busy(d) {
			return true
		}
	}
	return false
}

// speak sends hello and spec, lets the parties start, then pings every
// third of the heartbeat until done.
func (l *launch) speak(pctx context.Context, w *shared.Writer, done <-chan struct{}, log *slog.Logger) {
	hello := shared.Hello{Version: shared.ProtocolVersion, Nonce: l.box.Nonce}
	if err := w.Send(shared.FrameHello, hello.Marshal()); err != nil {
		log.Debug("send hello", "err", err)
		return
	}
	if err := w.Send(shared.FrameSpec, l.spec.Marshal()); err != nil {
		log.Debug("send spec", "err", err)
		return
	}
	for _, p := range l.o.Parties {
		p.Sent(pctx, w)
	}
	if l.o.Heartbeat <= 0 {
		return
	}
	t := time.NewTicker(l.o.Heartbeat / 3)
	defer t.Stop()
	for seq := shared.Seq(1); ; seq++ {
		select {
		case <-done:
			return
		case <-t.C:
			if err := w.Send(shared.FramePing, seq.Marshal()); err != nil {
				return
			}
		}
	}
}

// readResult is how the box's side of the stream ended.
type readResult struct {
	exit   *shared.Exit
	ready  bool
	err    error
	outErr error // a write of the agent's output failed
}

// read takes the box's frames until the stream ends or breaks, and
// sends how it ended on res. A broken stream is closed: the box ends
// (fail closed).
func (l *launch) read(st *Started, w *shared.Writer, in *input, ready chan struct{}, res chan<- readResult, log *slog.Logger) {
	var readyOnce sync.Once
	var o readResult
	r := shared.NewReader(bufio.NewReaderSize(st.Control, 2*shared.MaxChunk))
	for {
		f, err := r.Next()
		if err != nil {
			if err != io.EOF {
				o.err = err
			}
			break
		}
		switch f.Type {
		case shared.FrameReady:
			rd, err := shared.ParseReady(f.Payload)
			if err != nil {
				o.err = err
				break
			}
			o.ready = true
			readyOnce.Do(func() {
				l.emit(Event{Event: EventReady, PID: rd.PID})
				log.Info("ready", "agent_pid", rd.PID)
				close(ready)
				if l.hooks != nil {
					l.hooks.Ready(l.ctx, l.box)
				}
				for _, p := range l.o.Parties {
					p.Ready()
				}
				if in != nil {
					go in.pump(l.x.Stdin, w, log)
				}
			})
			continue
		case shared.FrameStdinCredit:
			if in == nil {
				o.err = &shared.ProtocolError{Reason: "stdin-credit from a box that takes no input"}
				break
			}
			if err := in.win.Grant(f.Payload); err != nil {
				o.err = err
				break
			}
			continue
		case shared.FrameStdout, shared.FrameStderr:
			// Output nobody reads is the controller's loss (EPIPE: its
			// end is gone), never dropped.
			out, name := l.x.Stdout, "stdout"
			if f.Type == shared.FrameStderr {
				out, name = l.x.Stderr, "stderr"
			}
			if _, err := out.Write(f.Payload); err != nil {
				o.outErr = fmt.Errorf("write the agent's output to the supervisor's %s: %w", name, err)
				break
			}
			continue
		case shared.FramePong:
			continue
		case shared.FrameExit:
			x, err := shared.ParseExit(f.Payload)
			if err != nil {
				o.err = err
				break
			}
			o.exit = &x
			if in != nil {
				in.end() // no input after the exit record
			}
			// The exit record is the last frame the supervisor needs: a
			// stream that can end its write half alone (Kubernetes' exec
			// session of the watcher's relay) ends it now, so the relay
			// ends PID 1's connection and PID 1 need not wait for it.
			if cw, ok := st.Control.(interface{ CloseWrite() error }); ok {
				if err := cw.CloseWrite(); err != nil {
					log.Debug("end the control stream's write half", "err", err)
				}
			}
			continue
		default:
			if o.err = l.partyFrame(f); o.err != nil {
				break
			}
			continue
		}
		break
	}
	if in != nil {
		in.end()
	}
	if o.err != nil || o.outErr != nil {
		// Fail closed: a broken stream ends the box.
		st.Control.Close()
	}
	res <- o
}
