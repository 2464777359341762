package supervisor

// The host's half of the agent's input (shared/stdin.go is the
// contract): a pump reads the supervisor's stdin and sends it as stdin
// frames under the box's credit, then stdin-eof once; the window size
// follows the host terminal as resize frames. Both start only at ready.

import (
	"errors"
	"io"
	"log/slog"
	"sync"

	"deathwatch/shared"
)

// input is one launch's stdin relay: the credit window and whether the
// box has ended (no stdin-eof after the exit record).
type input struct {
	win   shared.StdinWindow
	mu    sync.Mutex
	ended bool
}

// end closes the window: a pump waiting for credit returns, and no
// stdin-eof follows.
func (in *input) end() {
	in.mu.Lock()
	in.ended = true
	in.mu.Unlock()
	in.win.Close()
}

// pump relays r to the box as stdin frames, as fast as the credit
// allows, in reads of up to one chunk, then sends stdin-eof once when r
// reaches its end. A nil r is an empty input. It returns when r ends or
// fails, when the box ends, or when the stream cannot be written.
func (in *input) pump(r io.Reader, w *shared.Writer, log *slog.Logger) {
	if r != nil {
		buf := make([]byte, shared.MaxChunk)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if serr := in.win.Send(w, buf[:n]); serr != nil {
					if !errors.Is(serr, shared.ErrWindowClosed) {
						log.Debug("send stdin", "err", serr)
					}
					return
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				// An unreadable stdin ends the input as EOF would: the
				// agent sees its stdin close; the box stays watched.
				log.Info("reading stdin", "err", err)
				break
			}
		}
	}
	in.mu.Lock()
	ended := in.ended
	in.mu.Unlock()
	if ended {
		return
	}
	if err := w.Send(shared.FrameStdinEOF, nil); err != nil {
		log.Debug("send stdin-eof", "err", err)
	}
}

// resizes sends the window sizes from sizes as resize frames, none
// before ready: a size that comes earlier is held and only the latest
// is sent once ready is closed. It returns when done is closed.
func resizes(sizes <-chan shared.Resize, ready, done <-chan struct{}, w *shared.Writer, log *slog.Logger) {
	var pending *shared.Resize
	send := func(r shared.Resize) {
		if err := w.Send(shared.FrameResize, r.Marshal()); err != nil {
			log.Debug("send resize", "err", err)
		}
	}
	for {
		select {
		case <-done:
			return
		case r := <-sizes:
			if ready != nil {
				pending = &r
				continue
			}
			send(r)
		case <-ready:
			ready = nil
			if pending != nil {
				send(*pending)
				pending = nil
			}
		}
	}
}
