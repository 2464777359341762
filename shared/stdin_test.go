package shared

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCheckStdinPayloads(t *testing.T) {
	for _, n := range []int{1, MaxChunk} {
		if err := CheckStdin(make([]byte, n)); err != nil {
			t.Errorf("stdin of %d bytes: %v", n, err)
		}
	}
	for _, n := range []int{0, MaxChunk + 1} {
		if err := CheckStdin(make([]byte, n)); !IsProtocolError(err) {
			t.Errorf("stdin of %d bytes: err = %v, want a ProtocolError", n, err)
		}
	}
	if err := CheckStdinEOF(nil); err != nil {
		t.Errorf("stdin-eof without payload: %v", err)
	}
	if err := CheckStdinEOF([]byte{0}); !IsProtocolError(err) {
		t.Errorf("stdin-eof with a payload: err = %v, want a ProtocolError", err)
	}
}

// TestStdinWindowSendsNoMoreThanGranted: Send stops when the credit is
// used up, resumes on the next grant, never sends a frame over MaxChunk
// or an empty one, and the bytes arrive whole and in order.
func TestStdinWindowSendsNoMoreThanGranted(t *testing.T) {
	rd, wr := io.Pipe()
	out := NewWriter(wr)
	// The receiving end: every frame a good stdin frame, the bytes in order.
	var mu sync.Mutex
	var got []byte
	var bad error
	go func() {
		r := NewReader(rd)
		for {
			f, err := r.Next()
			if err != nil {
				return
			}
			mu.Lock()
			if f.Type != FrameStdin {
				bad = errors.New("a " + f.Type.String() + " frame, want stdin")
			} else if err := CheckStdin(f.Payload); err != nil {
				bad = err
			}
			got = append(got, f.Payload...)
			mu.Unlock()
		}
	}()
	received := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }

	var win StdinWindow
	if err := win.Grant(Credit{Bytes: 100 << 10}.Marshal()); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 20<<10) // 320 KiB
	done := make(chan error, 1)
	go func() { done <- win.Send(out, data) }()

	// Stalls once 100 KiB went out.
	waitUntil(t, func() bool { return received() >= 100<<10 })
	select {
	case err := <-done:
		t.Fatalf("Send returned (%v) with 100 KiB of credit for 320 KiB", err)
	case <-time.After(50 * time.Millisecond):
	}
	if win.Avail() != 0 || received() != 100<<10 {
		t.Fatalf("Avail() = %d, %d bytes received after the credit of %d was used up", win.Avail(), received(), 100<<10)
	}
	for granted := 100 << 10; granted < len(data); granted += 70 << 10 {
		if err := win.Grant(Credit{Bytes: 70 << 10}.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Send: %v", err)
	}
	waitUntil(t, func() bool { return received() == len(data) })
	mu.Lock()
	if bad != nil {
		t.Fatalf("sent a bad frame: %v", bad)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("received %d bytes, not the %d sent in order", len(got), len(data))
	}
	mu.Unlock()
	// 320 KiB granted 100 + 4×70 = 380: 60 KiB left.
	if win.Avail() != 60<<10 {
		t.Errorf("Avail() = %d, want %d", win.Avail(), 60<<10)
	}
}

func TestStdinWindowCloseReleasesASender(t *testing.T) {
	var win StdinWindow
	done := make(chan error, 1)
	go func() { done <- win.Send(NewWriter(io.Discard), []byte("x")) }()
	time.Sleep(10 * time.Millisecond)
	win.Close()
	if err := <-done; !errors.Is(err, ErrWindowClosed) {
		t.Fatalf("Send after Close = %v, want ErrWindowClosed", err)
	}
	if _, err := win.Take(1); !errors.Is(err, ErrWindowClosed) {
		t.Fatalf("Take after Close = %v, want ErrWindowClosed", err)
	}
}

func TestStdinWindowRefusesTooMuchCredit(t *testing.T) {
	var win StdinWindow
	for i := 0; i < MaxStdinWindow/StdinWindowSize; i++ {
		if err := win.Grant(Credit{Bytes: StdinWindowSize}.Marshal()); err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
	}
	err := win.Grant(Credit{Bytes: 1}.Marshal())
	if !IsProtocolError(err) || !strings.Contains(err.Error(), "outstanding") {
		t.Fatalf("credit past MaxStdinWindow: err = %v, want a ProtocolError", err)
	}
	if err := win.Grant(nil); !IsProtocolError(err) {
		t.Fatalf("empty credit payload: err = %v, want a ProtocolError", err)
	}
	if n, err := win.Take(0); n != 0 || err != nil {
		t.Fatalf("Take(0) = %d, %v", n, err)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("condition not reached within 10s")
		}
	}
}
