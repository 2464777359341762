package watcher

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"deathwatch/shared"
)

// credits reads the frames a relay sends the host and sums the credit
// they grant; a frame of another type makes the sum negative.
func credits(t *testing.T) (*shared.Writer, *atomic.Int64) {
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wr.Close() })
	var sum atomic.Int64
	go func() {
		defer rd.Close()
		fr := shared.NewReader(rd)
		for {
			f, err := fr.Next()
			if err != nil {
				return
			}
			c, err := shared.ParseCredit(f.Payload)
			if f.Type != shared.FrameStdinCredit || err != nil {
				sum.Store(-1 << 40)
				return
			}
			sum.Add(int64(c.Bytes))
		}
	}()
	return shared.NewWriter(wr), &sum
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// TestStdinRelay: the window is granted at the start, input beyond the
// credit is a protocol error, bytes reach the pipe in order, the credit
// comes back as they leave the queue, stdin-eof closes the pipe after
// them, and nothing may follow it.
func TestStdinRelay(t *testing.T) {
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	out, granted := credits(t)
	r := newStdinRelay(wr, false, out)
	r.window = 64 << 10 // smaller than the pipe's buffer: the test need not read
	go r.run()
	waitFor(t, "the first grant", func() bool { return granted.Load() == int64(r.window) })

	if err := r.push(bytes.Repeat([]byte{'x'}, shared.MaxChunk+1)); !shared.IsProtocolError(err) {
		t.Fatalf("push of MaxChunk+1 bytes = %v, want a ProtocolError", err)
	}
	var want []byte
	for i := 0; i < 2; i++ {
		p := bytes.Repeat([]byte{byte('a' + i)}, shared.MaxChunk)
		if err := r.push(p); err != nil {
			t.Fatalf("push %d within the credit: %v", i, err)
		}
		want = append(want, p...)
	}
	// The whole window went out: the rest waits for credit, unless the
	// relay already gave some back.
	waitFor(t, "the credit back", func() bool { return granted.Load() == int64(2*r.window) })
	r.mu.Lock()
	credit := r.credit
	r.mu.Unlock()
	if credit != r.window {
		t.Fatalf("credit %d after the queue drained, want the whole window %d", credit, r.window)
	}
	if err := r.push(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	want = append(want, 0)
	r.mu.Lock()
	r.credit = 0 // as if the host had used it all
	r.mu.Unlock()
	err = r.push([]byte("over"))
	if !shared.IsProtocolError(err) || !strings.Contains(err.Error(), "beyond the credit") {
		t.Fatalf("push beyond the credit = %v, want a ProtocolError", err)
	}
	if err := r.end(); err != nil {
		t.Fatal(err)
	}
	if err := r.end(); !shared.IsProtocolError(err) {
		t.Fatalf("a second stdin-eof = %v, want a ProtocolError", err)
	}
	r.mu.Lock()
	r.credit = 10
	r.mu.Unlock()
	if err := r.push([]byte("late")); !shared.IsProtocolError(err) {
		t.Fatalf("stdin after stdin-eof = %v, want a ProtocolError", err)
	}
	got, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the pipe read %d bytes, want the %d pushed, in order", len(got), len(want))
	}
}

// TestStdinRelayDropsForAGoneReader: once the agent's stdin is closed,
// input is dropped and its credit still comes back.
func TestStdinRelayDropsForAGoneReader(t *testing.T) {
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	rd.Close()
	out, granted := credits(t)
	r := newStdinRelay(wr, false, out)
	go r.run()
	waitFor(t, "the first grant", func() bool { return granted.Load() == int64(r.window) })
	for i := 0; i < 3*r.window/shared.MaxChunk; i++ {
		waitFor(t, "credit", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.credit >= shared.MaxChunk })
		if err := r.push(make([]byte, shared.MaxChunk)); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	waitFor(t, "all the credit back", func() bool { return granted.Load() == int64(4*r.window) })
	r.stop()
	if err := r.push(make([]byte, shared.MaxChunk)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := granted.Load(); got != int64(4*r.window) {
		t.Fatalf("credit granted after stop: %d, want %d", got, 4*r.window)
	}
}
