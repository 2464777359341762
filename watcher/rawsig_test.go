//go:build amd64 || arm64

package watcher

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

var nilInt *int

// TestRawHandlers: the watcher's own handler hands on a signal a
// process sent, SIGSEGV included, and a fault the kernel raises still
// reaches the runtime, which turns it into a panic.
func TestRawHandlers(t *testing.T) {
	c := make(chan os.Signal, 8)
	if !catchRaw([]syscall.Signal{syscall.SIGUSR2, syscall.SIGSEGV}, c) {
		t.Fatal("catchRaw could not install the handlers")
	}
	func() {
		defer func() {
			if r, ok := recover().(runtime.Error); !ok {
				t.Errorf("a nil dereference recovered %v, want the runtime's panic", r)
			}
		}()
		_ = *nilInt
	}()
	for _, s := range []syscall.Signal{syscall.SIGUSR2, syscall.SIGSEGV} {
		if err := syscall.Kill(syscall.Getpid(), s); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-c:
			if got != s {
				t.Errorf("sent %v, the channel got %v", s, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%v sent to the process never reached the channel", s)
		}
	}
}
