package shared

import (
	"errors"
	"sync"
)

// Agent input: the stdin relay and its credit.
//
// A spec with Stdin gives the agent a pipe for its stdin; a spec with TTY
// gives it a pseudo-terminal, whose input is fed the same way. Without
// either, the agent's stdin is /dev/null and the box accepts no input.
// Either way the agent's stdin is never the control stream: input
// reaches it only as stdin frames, which the watcher writes for it.
//
// Input is bounded by credit, so that neither side buffers without
// limit and the watcher never stops reading the stream (pings and EOF
// must always get through):
//
//   - After ready, a watcher that relays input (the spec asked for stdin
//     or tty; never otherwise, so a host that predates input never sees
//     the frame) sends stdin-credit granting StdinWindowSize bytes. It
//     grants again as bytes leave its queue (written to the agent's
//     stdin, or discarded once the agent's stdin is gone): when the
//     returned bytes reach a quarter of the window, or whenever its
//     queue runs empty. No stdin-credit follows the exit record.
//   - The host sends no stdin, stdin-eof or resize before ready (the
//     spec carries the first window size); stdin before the first
//     stdin-credit is beyond the credit.
//   - The host may have at most the granted bytes in flight: the sum of
//     stdin payloads it sent never exceeds the sum of the credit it
//     received. Its stdin frames carry 1 to MaxChunk bytes each; it
//     sends a smaller frame rather than wait for credit for a whole
//     chunk (StdinWindow does all of this).
//   - stdin-eof (no payload) ends the input once the queued bytes are
//     written: a pipe is closed, and a pty gets the terminal's EOF
//     character (VEOF, ^D by default; at the start of a line it ends a
//     read in canonical mode, as a typist's ^D would). At most one, and
//     no stdin frame follows it.
//   - A stdin frame beyond the credit, an empty or oversized one, one
//     after stdin-eof, a stdin frame to a box that granted no credit, a
//     second stdin-eof and a payload on stdin-eof are protocol errors:
//     the watcher kills the box (fail closed). stdin-eof to a box
//     without input is accepted and changes nothing (its stdin,
//     /dev/null, is at its end already).
//   - resize (rows, cols) sets the pty's window size; the kernel sends
//     the agent's foreground process group SIGWINCH. Without a pty it is
//     accepted and ignored.
//
// A host that runs out of credit waits for more: it keeps reading the
// box's frames and keeps sending pings meanwhile. A stalled agent thus
// stalls only its input, never the liveness of the box.

// StdinWindowSize is the credit a watcher grants at the start: the most
// input it holds queued for the agent.
const StdinWindowSize = 256 << 10

// MaxStdinWindow bounds the credit a host accepts to have outstanding;
// more is a protocol error (a broken watcher, or one that is not ours).
const MaxStdinWindow = 4 << 20

// Credit is the payload of stdin-credit: how many more bytes of input the
// host may send.
type Credit struct{ Bytes uint32 }

func (c Credit) Marshal() []byte { var e enc; e.u64(uint64(c.Bytes)); return e.b }

func ParseCredit(b []byte) (Credit, error) {
	d := dec{b: b, what: "stdin-credit"}
	n := d.u64("bytes")
	if d.err == nil && (n == 0 || n > MaxStdinWindow) {
		d.fail("bytes", "not a credit (1-"+itoa(MaxStdinWindow)+")")
	}
	return Credit{Bytes: uint32(n)}, d.done()
}

// CheckStdin checks the payload of a stdin frame: 1 to MaxChunk bytes.
func CheckStdin(b []byte) error {
	if len(b) == 0 || len(b) > MaxChunk {
		return &ProtocolError{Reason: "stdin: " + itoa(len(b)) + " bytes (want 1-" + itoa(MaxChunk) + ")"}
	}
	return nil
}

// CheckStdinEOF checks the payload of a stdin-eof frame: none.
func CheckStdinEOF(b []byte) error {
	if len(b) != 0 {
		return &ProtocolError{Reason: "stdin-eof: " + itoa(len(b)) + " trailing bytes"}
	}
	return nil
}

// ErrWindowClosed is what StdinWindow returns once it is closed.
var ErrWindowClosed = errors.New("stdin window closed: the box ended")

// StdinWindow is the host's side of the stdin credit: the bytes it may
// still send. Grant it every stdin-credit payload as it arrives; send
// input through Send (or Take) only; Close it when the box ends, which
// releases a sender waiting for credit. Safe for concurrent use.
type StdinWindow struct {
	mu     sync.Mutex
	cond   sync.Cond
	avail  int
	closed bool
}

// Grant adds the credit of a stdin-credit payload. A malformed payload,
// or outstanding credit beyond MaxStdinWindow, is a protocol error.
func (w *StdinWindow) Grant(payload []byte) error {
	c, err := ParseCredit(payload)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.avail+int(c.Bytes) > MaxStdinWindow {
		return &ProtocolError{Reason: "stdin-credit: " + itoa(w.avail+int(c.Bytes)) + " bytes outstanding exceed " + itoa(MaxStdinWindow)}
	}
	w.avail += int(c.Bytes)
	w.wake()
	return nil
}

// Take waits until there is credit and takes up to n bytes of it (at
// most MaxChunk): the caller then sends exactly that many. It returns
// ErrWindowClosed once the window is closed.
func (w *StdinWindow) Take(n int) (int, error) {
	n = min(n, MaxChunk)
	if n <= 0 {
		return 0, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.avail == 0 && !w.closed {
		if w.cond.L == nil {
			w.cond.L = &w.mu
		}
		w.cond.Wait()
	}
	if w.closed {
		return 0, ErrWindowClosed
	}
	n = min(n, w.avail)
	w.avail -= n
	return n, nil
}

// Avail is the credit not yet taken.
func (w *StdinWindow) Avail() int { w.mu.Lock(); defer w.mu.Unlock(); return w.avail }

// Close releases every sender waiting for credit; Take and Send then
// fail with ErrWindowClosed.
func (w *StdinWindow) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	w.wake()
}

func (w *StdinWindow) wake() {
	if w.cond.L != nil {
		w.cond.Broadcast()
	}
}

// Send sends data as stdin frames, as fast as the credit allows: it
// waits for credit whenever the window is used up.
func (w *StdinWindow) Send(out *Writer, data []byte) error {
	for len(data) > 0 {
		n, err := w.Take(len(data))
		if err != nil {
			return err
		}
		if err := out.Send(FrameStdin, data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}
