package shared

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// allFrameTypes lists every frame type of this protocol version.
var allFrameTypes = []FrameType{
	FrameHello, FrameSpec, FramePing, FrameStdin, FrameStdinEOF, FrameSignal, FrameResize, FrameStop,
	FrameReady, FrameStdout, FrameStderr, FramePong, FrameExit, FrameStdinCredit,
	FrameCopyInEntry, FrameCopyInData, FrameCopyInSum, FrameCopyInEnd, FrameCopyInLanded, FrameCopyOutFetched,
	FrameCopyOutEntry, FrameCopyOutData, FrameCopyOutSum, FrameCopyOutEnd,
}

func TestFrameTypesKnownAndNamed(t *testing.T) {
	if len(allFrameTypes) != len(frameNames)+len(copyFrameNames) {
		t.Fatalf("test lists %d frame types, the package names %d: keep allFrameTypes in step", len(allFrameTypes), len(frameNames)+len(copyFrameNames))
	}
	seen := map[string]bool{}
	for _, ft := range allFrameTypes {
		if !ft.Known() {
			t.Errorf("%v: Known() = false", ft)
		}
		name := ft.String()
		if strings.HasPrefix(name, "unknown") || seen[name] {
			t.Errorf("frame type 0x%02x: name %q is missing or not unique", byte(ft), name)
		}
		seen[name] = true
	}
	for b := 0; b < 256; b++ {
		ft := FrameType(b)
		_, named := ft.name()
		if ft.Known() != named {
			t.Errorf("0x%02x: Known() = %v, named = %v", b, ft.Known(), named)
		}
		if !named && !strings.HasPrefix(ft.String(), "unknown(0x") {
			t.Errorf("0x%02x: String() = %q, want unknown(0x..)", b, ft.String())
		}
	}
}

func TestFrameRoundTripEveryType(t *testing.T) {
	payloads := [][]byte{nil, {}, {0}, []byte("hello, box"), bytes.Repeat([]byte{0xa5}, MaxChunk), bytes.Repeat([]byte{1}, MaxPayload)}
	var stream bytes.Buffer
	w := NewWriter(&stream)
	type sent struct {
		t FrameType
		p []byte
	}
	var want []sent
	for _, ft := range allFrameTypes {
		for _, p := range payloads {
			if err := w.Send(ft, p); err != nil {
				t.Fatalf("Send(%v, %d bytes): %v", ft, len(p), err)
			}
			want = append(want, sent{ft, p})
		}
	}
	r := NewReader(&stream)
	for i, s := range want {
		f, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d (%v, %d bytes): %v", i, s.t, len(s.p), err)
		}
		if f.Type != s.t || !bytes.Equal(f.Payload, s.p) {
			t.Fatalf("frame %d: got %v with %d bytes, want %v with %d bytes", i, f.Type, len(f.Payload), s.t, len(s.p))
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last frame: got %v, want io.EOF", err)
	}
}

func TestAppendFrameLayout(t *testing.T) {
	got := AppendFrame([]byte("x"), FramePing, []byte{1, 2, 3})
	want := []byte{'x', byte(FramePing), 0, 0, 0, 3, 1, 2, 3}
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendFrame = % x, want % x", got, want)
	}
}

func TestWriterRefusesOversized(t *testing.T) {
	var buf bytes.Buffer
	err := NewWriter(&buf).Send(FrameStdout, make([]byte, MaxPayload+1))
	if err == nil {
		t.Fatal("Send of MaxPayload+1 bytes succeeded")
	}
	if buf.Len() != 0 {
		t.Fatalf("Send wrote %d bytes of a refused frame", buf.Len())
	}
}

// oneWriteCounter records how many Write calls a frame took.
type oneWriteCounter struct {
	writes int
	buf    bytes.Buffer
}

func (c *oneWriteCounter) Write(p []byte) (int, error) { c.writes++; return c.buf.Write(p) }

func TestWriterOneWritePerFrame(t *testing.T) {
	var c oneWriteCounter
	w := NewWriter(&c)
	for i, n := range []int{0, 1, MaxChunk, 5 * MaxChunk, 10} {
		if err := w.Send(FrameStdout, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		if c.writes != i+1 {
			t.Fatalf("after %d frames: %d Write calls", i+1, c.writes)
		}
	}
}

func header(t FrameType, size uint32) []byte {
	h := []byte{byte(t), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(h[1:], size)
	return h
}

func TestReaderMalformed(t *testing.T) {
	valid := AppendFrame(nil, FramePing, Seq(7).Marshal())
	cases := []struct {
		name   string
		stream []byte
		frames int // valid frames before the error
	}{
		{"one header byte", []byte{byte(FramePing)}, 0},
		{"four header bytes", []byte{byte(FramePing), 0, 0, 0}, 0},
		{"header only", header(FramePing, 1), 0},
		{"half a payload", append(header(FrameStdout, 10), 1, 2, 3, 4, 5), 0},
		{"unknown type 0x00", header(0x00, 0), 0},
		{"unknown type 0x7f", header(0x7f, 3), 0},
		{"unknown type 0xff", append(header(0xff, 1), 0), 0},
		{"oversized by one", header(FrameStdout, MaxPayload+1), 0},
		{"oversized 4 GiB", header(FrameSpec, 0xffffffff), 0},
		{"garbage text", []byte("GET / HTTP/1.1\r\n\r\n"), 0},
		{"valid then truncated", append(append([]byte{}, valid...), valid[:len(valid)-1]...), 1},
		{"valid then unknown", append(append([]byte{}, valid...), header(0x42, 0)...), 1},
		{"valid then oversized", append(append([]byte{}, valid...), header(FrameExit, MaxPayload+1)...), 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(c.stream))
			for i := 0; i < c.frames; i++ {
				if _, err := r.Next(); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
			}
			_, err := r.Next()
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("Next() = %v (%T), want *ProtocolError", err, err)
			}
			if !IsProtocolError(err) || pe.Reason == "" || !strings.HasPrefix(err.Error(), "control stream: ") {
				t.Fatalf("ProtocolError %q: want a reason and the control stream prefix", err)
			}
			t.Logf("%s", err)
		})
	}
}

// endless is a reader that never ends, counting what was read from it.
type endless struct{ n int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 0x5a
	}
	e.n += int64(len(p))
	return len(p), nil
}

// TestReaderHugeHeaderAllocatesNothing feeds a header that claims 4 GiB
// followed by an endless stream: the reader must refuse after the header
// without reading on and without allocating for the claimed size.
func TestReaderHugeHeaderAllocatesNothing(t *testing.T) {
	for _, size := range []uint32{0xffffffff, 1 << 31, MaxPayload + 1} {
		src := &endless{}
		stream := io.MultiReader(bytes.NewReader(header(FrameStdout, size)), src)
		r := NewReader(stream)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := r.Next()
		runtime.ReadMemStats(&after)
		if !IsProtocolError(err) {
			t.Fatalf("size %d: Next() = %v, want a ProtocolError", size, err)
		}
		if src.n != 0 {
			t.Errorf("size %d: the reader read %d bytes past the refused header", size, src.n)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
			t.Errorf("size %d: refusing the header allocated %d bytes", size, alloc)
		} else {
			t.Logf("size %d: refused after the header, %d bytes allocated", size, alloc)
		}
	}
}

// TestReaderTruncatedMaxAllocatesAtMostMaxPayload: a header at the limit
// followed by a short stream allocates the payload once, never more.
func TestReaderTruncatedMaxAllocatesAtMostMaxPayload(t *testing.T) {
	stream := append(header(FrameStdin, MaxPayload), make([]byte, 100)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := NewReader(bytes.NewReader(stream)).Next()
	runtime.ReadMemStats(&after)
	if !IsProtocolError(err) {
		t.Fatalf("Next() = %v, want a ProtocolError", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > MaxPayload+64<<10 {
		t.Fatalf("a truncated frame at the limit allocated %d bytes (limit %d)", alloc, MaxPayload)
	}
}

// errAfter returns data, then a non-EOF error.
type errAfter struct {
	data []byte
	err  error
}

func (e *errAfter) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

func TestReaderPassesIOErrors(t *testing.T) {
	boom := errors.New("boom")
	for _, data := range [][]byte{nil, {byte(FramePing), 0}, header(FramePing, 4)} {
		_, err := NewReader(&errAfter{data: data, err: boom}).Next()
		if !errors.Is(err, boom) {
			t.Errorf("after %d bytes: Next() = %v, want the reader's error", len(data), err)
		}
	}
}

func TestReaderCleanEOF(t *testing.T) {
	if _, err := NewReader(bytes.NewReader(nil)).Next(); err != io.EOF {
		t.Fatalf("empty stream: Next() = %v, want io.EOF", err)
	}
}

// payloadCase is one payload type: a value, how to marshal it and how to
// parse it back.
type payloadCase struct {
	name  string
	ft    FrameType
	value any
	enc   func() []byte
	parse func([]byte) (any, error)
}

func payloadCases() []payloadCase {
	started := time.Date(2026, 11, 30, 5, 6, 7, 891011121, time.UTC)
	hello := Hello{Version: ProtocolVersion, Nonce: "n-0123456789abcdef"}
	ready := Ready{PID: 4194304, Started: started}
	seq := Seq(1<<64 - 1)
	sig := Signal{Number: 15}
	rs := Resize{Rows: 65535, Cols: 80}
	stop := Stop{Grace: 2500 * time.Millisecond}
	exit := Exit{Reason: ReasonDeadline, Code: ExitDeadline, Signal: 9, Runtime: 90 * time.Second, Sweep: 3 * time.Millisecond, Message: "deadline of 1m30s passed; 2 processes killed"}
	spec := withCopies(fullSpec())
	spec.CopyOutArchive = true
	spec.LiveFIFO = "/dev/.deathwatch/live"
	spec.Writable, spec.RequireLandlock = []string{"/tmp", "/dev/null"}, true
	credit := Credit{Bytes: StdinWindowSize}
	return []payloadCase{
		{"credit", FrameStdinCredit, credit, credit.Marshal, func(b []byte) (any, error) { return ParseCredit(b) }},
		{"credit-1", FrameStdinCredit, Credit{Bytes: 1}, Credit{Bytes: 1}.Marshal, func(b []byte) (any, error) { return ParseCredit(b) }},
		{"hello", FrameHello, hello, hello.Marshal, func(b []byte) (any, error) { return ParseHello(b) }},
		{"hello-empty", FrameHello, Hello{}, Hello{}.Marshal, func(b []byte) (any, error) { return ParseHello(b) }},
		{"ready", FrameReady, ready, ready.Marshal, func(b []byte) (any, error) {
			r, err := ParseReady(b)
			r.Started = r.Started.UTC()
			return r, err
		}},
		{"seq", FramePing, seq, seq.Marshal, func(b []byte) (any, error) { return ParseSeq(b) }},
		{"seq-zero", FramePong, Seq(0), Seq(0).Marshal, func(b []byte) (any, error) { return ParseSeq(b) }},
		{"signal", FrameSignal, sig, sig.Marshal, func(b []byte) (any, error) { return ParseSignal(b) }},
		{"signal-64", FrameSignal, Signal{Number: 64}, Signal{Number: 64}.Marshal, func(b []byte) (any, error) { return ParseSignal(b) }},
		{"resize", FrameResize, rs, rs.Marshal, func(b []byte) (any, error) { return ParseResize(b) }},
		{"stop", FrameStop, stop, stop.Marshal, func(b []byte) (any, error) { return ParseStop(b) }},
		{"stop-zero", FrameStop, Stop{}, Stop{}.Marshal, func(b []byte) (any, error) { return ParseStop(b) }},
		{"exit", FrameExit, exit, exit.Marshal, func(b []byte) (any, error) { return ParseExit(b) }},
		{"exit-empty", FrameExit, Exit{}, Exit{}.Marshal, func(b []byte) (any, error) { return ParseExit(b) }},
		{"spec", FrameSpec, spec, spec.Marshal, func(b []byte) (any, error) { return ParseSpec(b) }},
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	for _, c := range payloadCases() {
		t.Run(c.name, func(t *testing.T) {
			b := c.enc()
			got, err := c.parse(b)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !reflect.DeepEqual(got, c.value) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, c.value)
			}
			// Through a frame as well.
			var stream bytes.Buffer
			if err := NewWriter(&stream).Send(c.ft, b); err != nil {
				t.Fatal(err)
			}
			f, err := NewReader(&stream).Next()
			if err != nil || f.Type != c.ft || !bytes.Equal(f.Payload, b) {
				t.Fatalf("frame round trip: %v %v", f.Type, err)
			}
		})
	}
}

// TestPayloadTruncatedAndTrailing: every strict prefix of a payload and
// the payload with a trailing byte are ProtocolErrors, never a panic.
func TestPayloadTruncatedAndTrailing(t *testing.T) {
	for _, c := range payloadCases() {
		t.Run(c.name, func(t *testing.T) {
			b := c.enc()
			for n := 0; n < len(b); n++ {
				if c.ft == FrameSpec && specTails(b)[n] {
					continue // an older supervisor's spec: see TestSpecWithoutFilterFields
				}
				if _, err := c.parse(b[:n]); !IsProtocolError(err) {
					t.Fatalf("prefix of %d/%d bytes: err = %v, want a ProtocolError", n, len(b), err)
				}
			}
			_, err := c.parse(append(append([]byte{}, b...), 0))
			if !IsProtocolError(err) || !strings.Contains(err.Error(), "trailing") {
				t.Fatalf("one trailing byte: err = %v, want a trailing-bytes ProtocolError", err)
			}
		})
	}
}

func TestPayloadBadValues(t *testing.T) {
	var e enc
	bigVarint := func(v uint64) []byte { var e enc; e.u64(v); return e.b }
	e.u64(1 << 40)
	cases := []struct {
		name  string
		parse func([]byte) error
		b     []byte
		field string
	}{
		{"signal 0", func(b []byte) error { _, err := ParseSignal(b); return err }, bigVarint(0), "number"},
		{"signal 65", func(b []byte) error { _, err := ParseSignal(b); return err }, bigVarint(65), "number"},
		{"credit 0", func(b []byte) error { _, err := ParseCredit(b); return err }, bigVarint(0), "bytes"},
		{"credit over the most outstanding", func(b []byte) error { _, err := ParseCredit(b); return err }, bigVarint(MaxStdinWindow + 1), "bytes"},
		{"resize rows 65536", func(b []byte) error { _, err := ParseResize(b); return err }, append(bigVarint(65536), 1), "rows/cols"},
		{"stop negative", func(b []byte) error { _, err := ParseStop(b); return err }, Stop{Grace: -1}.Marshal(), "grace"},
		{"hello version > 32 bits", func(b []byte) error { _, err := ParseHello(b); return err }, append(e.b, 0), "version"},
		{"ready pid > 32 bits", func(b []byte) error { _, err := ParseReady(b); return err }, append(bigVarint(1<<33), 0), "pid"},
		{"exit code > 32 bits", func(b []byte) error { _, err := ParseExit(b); return err }, append(append([]byte{0}, bigVarint(1<<32)...), 0, 0, 0, 0), "code"},
		{"non-canonical varint", func(b []byte) error { _, err := ParseSeq(b); return err }, []byte{0x80, 0x00}, "seq"},
		{"non-canonical signed varint", func(b []byte) error { _, err := ParseStop(b); return err }, []byte{0x82, 0x80, 0x00}, "grace"},
		{"overlong varint", func(b []byte) error { _, err := ParseSeq(b); return err }, bytes.Repeat([]byte{0xff}, 11), "seq"},
		{"string longer than payload", func(b []byte) error { _, err := ParseHello(b); return err }, []byte{1, 200, 'a'}, "nonce"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.parse(c.b)
			if !IsProtocolError(err) {
				t.Fatalf("err = %v, want a ProtocolError", err)
			}
			if !strings.Contains(err.Error(), "field "+c.field) {
				t.Fatalf("err = %q, want it to name field %s", err, c.field)
			}
		})
	}
}

// TestPayloadParseAllocationBounded: parsing a payload allocates a
// bounded multiple of its size, even when counts are as large as the
// bytes allow (a string header is 16 bytes, so a payload of empty
// strings decodes to at most 16x its size in headers).
func TestPayloadParseAllocationBounded(t *testing.T) {
	const n = 64 << 10
	var e enc
	e.u64(n) // argv count
	e.b = append(e.b, make([]byte, n)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ParseSpec(e.b)
	runtime.ReadMemStats(&after)
	if !IsProtocolError(err) { // env and the rest are missing
		t.Fatalf("ParseSpec = %v, want a ProtocolError", err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d-byte spec of empty argv strings allocated %d bytes (%.1fx)", len(e.b), alloc, float64(alloc)/float64(len(e.b)))
	if alloc > 20*uint64(len(e.b))+64<<10 {
		t.Fatalf("parsing %d bytes allocated %d bytes", len(e.b), alloc)
	}
}

// FuzzReader feeds arbitrary bytes to the frame reader and every frame it
// returns to the payload parser of its type. Nothing may panic, every
// error that is not io.EOF is a ProtocolError (the source never fails),
// and a parsed payload re-marshals to the bytes it came from.
func FuzzReader(f *testing.F) {
	for _, c := range payloadCases() {
		f.Add(AppendFrame(nil, c.ft, c.enc()))
	}
	f.Add(append(AppendFrame(AppendFrame(nil, FrameHello, Hello{Version: 1, Nonce: "x"}.Marshal()), FrameSpec, fullSpec().Marshal()), AppendFrame(nil, FramePing, Seq(1).Marshal())...))
	f.Add(header(FrameStdout, 0xffffffff))
	f.Add(header(0x7f, 0))
	f.Add([]byte{byte(FramePing), 0, 0})
	f.Add(AppendFrame(nil, FrameStdin, []byte("data")))
	f.Add(AppendFrame(AppendFrame(nil, FrameStdin, bytes.Repeat([]byte{'x'}, MaxChunk+1)), FrameStdinEOF, nil))
	f.Add(AppendFrame(nil, FrameStdinEOF, []byte{0}))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		consumed := 0
		for {
			fr, err := r.Next()
			if err == io.EOF {
				if consumed != len(data) {
					t.Fatalf("io.EOF after %d of %d bytes", consumed, len(data))
				}
				return
			}
			if err != nil {
				if !IsProtocolError(err) {
					t.Fatalf("Next() = %v (%T), want a ProtocolError", err, err)
				}
				return
			}
			if len(fr.Payload) > MaxPayload || !fr.Type.Known() {
				t.Fatalf("accepted %v frame of %d bytes", fr.Type, len(fr.Payload))
			}
			consumed += HeaderSize + len(fr.Payload)
			checkPayload(t, fr)
		}
	})
}

// checkPayload parses a frame's payload by type; what parses must
// re-marshal to the same bytes.
func checkPayload(t *testing.T, fr Frame) {
	t.Helper()
	var again []byte
	var err error
	switch fr.Type {
	case FrameHello:
		var v Hello
		if v, err = ParseHello(fr.Payload); err == nil {
			again = v.Marshal()
		}
	case FrameSpec:
		var v Spec
		if v, err = ParseSpec(fr.Payload); err == nil {
			_ = v.Validate()
			again = v.Marshal()
		}
	case FramePing, FramePong:
		var v Seq
		if v, err = ParseSeq(fr.Payload); err == nil {
			again = v.Marshal()
		}
	case FrameSignal:
		var v Signal
		if v, err = ParseSignal(fr.Payload); err == nil {
			again = v.Marshal()
		}
	case FrameResize:
		var v Resize
		if v, err = ParseResize(fr.Payload); err == nil {
			again = v.Marshal()
		}
	case FrameStop:
		var v Stop
		if v, err = ParseStop(fr.Payload); err == nil {
			again = v.Marshal()
		}
	case FrameReady:
		var v Ready
		if v, err = ParseReady(fr.Payload); err == nil {
			again = v.Marshal()
		}
	case FrameExit:
		var v Exit
		if v, err = ParseExit(fr.Payload); err == nil {
			again = v.Marshal()
		}
	case FrameStdinCredit:
		var v Credit
		if v, err = ParseCredit(fr.Payload); err == nil {
			again = v.Marshal()
		}
	case FrameStdin:
		if err = CheckStdin(fr.Payload); err == nil {
			again = fr.Payload
		}
	case FrameStdinEOF:
		err = CheckStdinEOF(fr.Payload)
	default: // raw output: stdout, stderr
		return
	}
	if err != nil {
		if !IsProtocolError(err) {
			t.Fatalf("parse %v: %v (%T), want a ProtocolError", fr.Type, err, err)
		}
		return
	}
	if !bytes.Equal(again, fr.Payload) {
		t.Fatalf("%v payload % x re-marshals to % x", fr.Type, fr.Payload, again)
	}
}

// specTails are the lengths at which spec payload b, cut short, is
// still a whole spec: without the field groups added after the first
// protocol version (they are optional).
func specTails(b []byte) map[int]bool {
	s, err := ParseSpec(b)
	if err != nil {
		return nil
	}
	noWalls := len(withoutWalls(s).Marshal())
	s = withoutWalls(s)
	noLive := len(withoutLive(s).Marshal())
	s = withoutLive(s)
	noArc := len(noArchive(s).Marshal())
	s = noArchive(s)
	return map[int]bool{noWalls: true, noLive: true, noArc: true, len(oldSpec(s).Marshal()): true, len(oldSpec(noCopies(s)).Marshal()): true, len(noStdin(noCopies(s)).Marshal()): true, len(noCopies(s).Marshal()): true, len(noEntryLimit(s).Marshal()): true}
}

// withoutWalls is s as a supervisor before the write limits sent it.
func withoutWalls(s Spec) Spec {
	s.Writable, s.RequireLandlock = nil, false
	return s
}

// withoutLive is s as a supervisor before live_fifo sent it.
func withoutLive(s Spec) Spec {
	s.LiveFIFO = ""
	return s
}

// noArchive is s as a supervisor before copy_out_archive sent it.
func noArchive(s Spec) Spec {
	s.CopyOutArchive = false
	return s
}

// noEntryLimit is s as a supervisor before copy_out_max_entries sent it.
func noEntryLimit(s Spec) Spec {
	s.CopyOutMaxEntries = 0
	return s
}
