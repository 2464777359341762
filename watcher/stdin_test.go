package watcher

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"deathwatch/shared"
)

// frameLog records the frames a relay sends the host.
type frameLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *frameLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// credit sums the stdin-credit frames so far.
func (l *frameLog) credit(t *testing.T) int {
	t.Helper()
	l.mu.Lock()
	r := shared.NewReader(bytes.NewReader(append([]byte(nil), l.b.Bytes()...)))
	l.mu.Unlock()
	sum := 0
	for {
		f, err := r.Next()
		if err == io.EOF {
			return sum
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Type != shared.FrameStdinCredit {
			t.Fatalf("the relay sent a %v frame", f.Type)
		}
		c, err := shared.ParseCredit(f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		sum += int(c.Bytes)
	}
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
	var log frameLog
	r := newStdinRelay(wr, false, shared.NewWriter(&log))
	r.window = 64 << 10 // smaller than the pipe's buffer: the test need not read
	go r.run()
	waitFor(t, "the first grant", func() bool { return log.credit(t) == r.window })

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
	waitFor(t, "the credit back", func() bool { return log.credit(t) == 2*r.window })
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
	var log frameLog
	r := newStdinRelay(wr, false, shared.NewWriter(&log))
	go r.run()
	waitFor(t, "the first grant", func() bool { return log.credit(t) == r.window })
	for i := 0; i < 3*r.window/shared.MaxChunk; i++ {
		waitFor(t, "credit", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.credit >= shared.MaxChunk })
		if err := r.push(make([]byte, shared.MaxChunk)); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	waitFor(t, "all the credit back", func() bool { return log.credit(t) == 4*r.window })
	r.stop()
	if err := r.push(make([]byte, shared.MaxChunk)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := log.credit(t); got != 4*r.window {
		t.Fatalf("credit granted after stop: %d, want %d", got, 4*r.window)
	}
}
