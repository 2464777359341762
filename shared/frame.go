package shared

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
)

// FrameType is the first byte of every frame on the control stream.
type FrameType byte

// Host → box frames.
const (
	FrameHello    FrameType = 0x01 // Hello: protocol version, launch nonce
	FrameSpec     FrameType = 0x02 // Spec: what to run and how
	FramePing     FrameType = 0x03 // Ping: heartbeat, answered by pong
	FrameStdin    FrameType = 0x04 // raw bytes for the agent's stdin
	FrameStdinEOF FrameType = 0x05 // the agent's stdin reaches end of file
	FrameSignal   FrameType = 0x06 // Signal: deliver to the agent
	FrameResize   FrameType = 0x07 // Resize: new pty window size
	FrameStop     FrameType = 0x08 // Stop: TERM, up to grace, KILL
)

// Box → host frames.
const (
	FrameReady  FrameType = 0x81 // Ready: the agent started
	FrameStdout FrameType = 0x82 // raw bytes the agent wrote to stdout
	FrameStderr FrameType = 0x83 // raw bytes the agent wrote to stderr
	FramePong   FrameType = 0x84 // Ping echoed
	FrameExit   FrameType = 0x85 // Exit: the final record
	// Credit: more bytes of input the host may send (see stdin.go).
	FrameStdinCredit FrameType = 0x86
)

// frameNames names the frame types of this file; copyFrameNames
// (copy.go) the copy's. Tables the linker lays out, not a map: a map is
// made on the heap by every process at its start, and the watcher (PID
// 1 of every box) keeps resident the spans its start took.
var frameNames = [...]frameName{
	{FrameHello, "hello"}, {FrameSpec, "spec"}, {FramePing, "ping"}, {FrameStdin, "stdin"},
	{FrameStdinEOF, "stdin-eof"}, {FrameSignal, "signal"}, {FrameResize, "resize"}, {FrameStop, "stop"},
	{FrameReady, "ready"}, {FrameStdout, "stdout"}, {FrameStderr, "stderr"}, {FramePong, "pong"}, {FrameExit, "exit"},
	{FrameStdinCredit, "stdin-credit"},
}

type frameName struct {
	t    FrameType
	name string
}

// name is t's name, and whether t is a frame type of this protocol.
func (t FrameType) name() (string, bool) {
	for _, names := range [...][]frameName{frameNames[:], copyFrameNames[:]} {
		for _, n := range names {
			if n.t == t {
				return n.name, true
			}
		}
	}
	return "", false
}

func (t FrameType) String() string {
	if n, ok := t.name(); ok {
		return n
	}
	return "unknown(" + hex8(byte(t)) + ")"
}

// Known reports whether t is a frame type of this protocol version.
func (t FrameType) Known() bool { _, ok := t.name(); return ok }

const (
	// HeaderSize is the type byte plus the big-endian payload length.
	HeaderSize = 5
	// MaxPayload is the hard limit on one frame's payload. A larger
	// length is a protocol error and nothing is allocated for it.
	MaxPayload = 1 << 20
	// MaxChunk is how much raw output or input one data frame carries.
	MaxChunk = 32 << 10
)

// Frame is one decoded frame. Payload is owned by the caller.
type Frame struct {
	Type    FrameType
	Payload []byte
}

// ProtocolError is a malformed stream. Either side treats it as a loss
// of liveness: the watcher kills the box.
type ProtocolError struct{ Reason string }

func (e *ProtocolError) Error() string { return "control stream: " + e.Reason }

// IsProtocolError reports whether err is (or wraps) a ProtocolError.
func IsProtocolError(err error) bool {
	var pe *ProtocolError
	return errors.As(err, &pe)
}

// AppendFrame appends the encoding of one frame to dst.
func AppendFrame(dst []byte, t FrameType, payload []byte) []byte {
	dst = append(dst, byte(t))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// Reader decodes frames from a stream.
type Reader struct {
	r   io.Reader
	hdr [HeaderSize]byte
}

// NewReader returns a Reader on r. Wrap r in a bufio.Reader for fewer
// system calls when that matters.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Next reads one frame. It returns io.EOF only at a frame boundary; a
// stream that ends inside a frame, an unknown type or an oversized
// length is a *ProtocolError.
func (r *Reader) Next() (Frame, error) {
	n, err := io.ReadFull(r.r, r.hdr[:])
	if err != nil {
		if err == io.EOF && n == 0 {
			return Frame{}, io.EOF
		}
		if err == io.ErrUnexpectedEOF {
			return Frame{}, &ProtocolError{Reason: "truncated header (" + itoa(n) + " of " + itoa(HeaderSize) + " bytes)"}
		}
		return Frame{}, err
	}
	t := FrameType(r.hdr[0])
	size := binary.BigEndian.Uint32(r.hdr[1:])
	if !t.Known() {
		return Frame{}, &ProtocolError{Reason: "unknown frame type " + hex8(byte(t))}
	}
	if size > MaxPayload {
		return Frame{}, &ProtocolError{Reason: t.String() + " frame of " + utoa(uint64(size)) + " bytes exceeds the " + itoa(MaxPayload) + "-byte limit"}
	}
	payload := make([]byte, size)
	if n, err := io.ReadFull(r.r, payload); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return Frame{}, &ProtocolError{Reason: "truncated " + t.String() + " frame (" + itoa(n) + " of " + utoa(uint64(size)) + " bytes)"}
		}
		return Frame{}, err
	}
	return Frame{Type: t, Payload: payload}, nil
}

// Writer encodes frames onto a stream; it is safe for concurrent use and
// writes each frame with a single Write call.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Send writes one frame.
func (w *Writer) Send(t FrameType, payload []byte) error {
	if len(payload) > MaxPayload {
		return errors.New("send " + t.String() + " frame: " + itoa(len(payload)) + " bytes exceeds the " + itoa(MaxPayload) + "-byte limit")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = AppendFrame(w.buf[:0], t, payload)
	_, err := w.w.Write(w.buf)
	if cap(w.buf) > 4*MaxChunk {
		w.buf = nil
	}
	return err
}
