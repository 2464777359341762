package supervisor

import (
	"bytes"
	"io"
	"log/slog"
	"testing"
	"time"

	"deathwatch/shared"
)

// frames returns a Writer and the frames written to it, as they come.
func frames(t *testing.T) (*shared.Writer, <-chan shared.Frame) {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	ch := make(chan shared.Frame, 1024)
	go func() {
		r := shared.NewReader(pr)
		for {
			f, err := r.Next()
			if err != nil {
				close(ch)
				return
			}
			ch <- f
		}
	}()
	return shared.NewWriter(pw), ch
}

func next(t *testing.T, ch <-chan shared.Frame) shared.Frame {
	t.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("no frame within 5s")
	}
	return shared.Frame{}
}

func quiet(t *testing.T, ch <-chan shared.Frame, what string) {
	t.Helper()
	select {
	case f := <-ch:
		t.Fatalf("%s: got a %s frame of %d bytes", what, f.Type, len(f.Payload))
	case <-time.After(100 * time.Millisecond):
	}
}

func grant(t *testing.T, in *input, n uint32) {
	t.Helper()
	if err := in.win.Grant(shared.Credit{Bytes: n}.Marshal()); err != nil {
		t.Fatal(err)
	}
}

func TestPumpHonoursCredit(t *testing.T) {
	w, ch := frames(t)
	data := bytes.Repeat([]byte("x"), 100_000)
	in := &input{}
	done := make(chan struct{})
	go func() { in.pump(bytes.NewReader(data), w, slog.New(slog.DiscardHandler)); close(done) }()
	quiet(t, ch, "before any credit")
	var got []byte
	for _, credit := range []uint32{1, 10_000, shared.MaxChunk + 5, 40_000, 50_000} {
		grant(t, in, credit)
		n := 0
		for n < int(credit) && len(got) < len(data) {
			f := next(t, ch)
			if f.Type != shared.FrameStdin {
				t.Fatalf("got %s, want stdin", f.Type)
			}
			if len(f.Payload) == 0 || len(f.Payload) > shared.MaxChunk {
				t.Fatalf("stdin frame of %d bytes", len(f.Payload))
			}
			n += len(f.Payload)
			got = append(got, f.Payload...)
		}
		if n > int(credit) {
			t.Fatalf("%d bytes sent on %d of credit", n, credit)
		}
		if len(got) < len(data) {
			quiet(t, ch, "credit used up")
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("relayed %d bytes, want the %d read, in order", len(got), len(data))
	}
	if f := next(t, ch); f.Type != shared.FrameStdinEOF || len(f.Payload) != 0 {
		t.Fatalf("got %s (%d bytes), want an empty stdin-eof", f.Type, len(f.Payload))
	}
	<-done
	quiet(t, ch, "after stdin-eof")
}

func TestPumpEmptyInput(t *testing.T) {
	for _, r := range []io.Reader{nil, bytes.NewReader(nil)} {
		w, ch := frames(t)
		in := &input{}
		in.pump(r, w, slog.New(slog.DiscardHandler))
		if f := next(t, ch); f.Type != shared.FrameStdinEOF {
			t.Fatalf("got %s, want stdin-eof", f.Type)
		}
		quiet(t, ch, "after stdin-eof")
	}
}

func TestPumpEndReleases(t *testing.T) {
	// The box ended while the pump waited for credit: it returns, and
	// sends no stdin-eof after the exit record.
	w, ch := frames(t)
	in := &input{}
	done := make(chan struct{})
	go func() { in.pump(bytes.NewReader([]byte("input")), w, slog.New(slog.DiscardHandler)); close(done) }()
	quiet(t, ch, "before any credit")
	in.end()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("pump still waits for credit after the box ended")
	}
	quiet(t, ch, "after the end")
}

func TestResizesAfterReady(t *testing.T) {
	w, ch := frames(t)
	sizes := make(chan shared.Resize)
	ready, done := make(chan struct{}), make(chan struct{})
	defer close(done)
	go resizes(sizes, ready, done, w, slog.New(slog.DiscardHandler))
	sizes <- shared.Resize{Rows: 10, Cols: 20}
	sizes <- shared.Resize{Rows: 30, Cols: 40}
	quiet(t, ch, "before ready")
	close(ready)
	want := func(rows, cols uint16) {
		t.Helper()
		f := next(t, ch)
		r, err := shared.ParseResize(f.Payload)
		if f.Type != shared.FrameResize || err != nil || r != (shared.Resize{Rows: rows, Cols: cols}) {
			t.Fatalf("got %s %+v (%v), want resize %dx%d", f.Type, r, err, rows, cols)
		}
	}
	want(30, 40) // only the latest early size
	quiet(t, ch, "after the held size")
	sizes <- shared.Resize{Rows: 50, Cols: 60}
	want(50, 60)
}
