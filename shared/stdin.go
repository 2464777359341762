package shared

import (
	"errors"
	"sync"
)

// Agent input: the stdin relay and its credit.
//
// A spec with Stdin gives the agent a pipe for its stdin, one with TTY a
// pseudo-terminal; without either its stdin is /dev/null. Input reaches
// the agent only as stdin frames the watcher writes for it, bounded by
// credit so that neither side buffers without limit and the watcher
// never stops reading the stream (pings and EOF always get through):
//   - After ready, a watcher that relays input (never otherwise) grants
//     StdinWindowSize bytes in stdin-credit, and grants again as bytes
//     leave its queue (written, or dropped once the agent's stdin is
//     gone): each quarter window, and whenever the queue runs empty.
//     No stdin-credit follows the exit record.
//   - The host sends no stdin, stdin-eof or resize before ready, and never
//     more stdin bytes than the credit it received, in frames of 1 to
//     MaxChunk bytes; it sends a smaller frame rather than wait for a
//     whole chunk's credit (StdinWindow).
//   - stdin-eof (no payload, at most one, last) ends the input once the
//     queue is written: a pipe is closed, a pty gets its VEOF character.
//   - resize (rows, cols) sets the pty's window size (the kernel sends
//     SIGWINCH); without a pty it is ignored.
//   - A stdin frame beyond the credit, empty, oversized, after stdin-eof
//     or to a box that granted no credit, a second stdin-eof and a
//     payload on stdin-eof are protocol errors: the watcher kills the
//     box. stdin-eof to a box without input changes nothing.
// A host out of credit waits, reading frames and sending pings: a
// stalled agent stalls only its input, never the box's liveness.

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
