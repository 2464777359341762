package supervisor

import (
	"bytes"
	"testing"
)

// tailWriter relays the box init's and the watcher's stderr with every
// control character escaped, line by line, and remembers the last line.
func TestTailWriterPrintable(t *testing.T) {
	var out bytes.Buffer
	tw := &tailWriter{w: &out}
	tw.Write([]byte("watcher: name x\x1b]52;c;AAAA\x07y\n"))
	tw.Write([]byte("last \x9b line\n"))
	if want := "watcher: name x\\x1b]52;c;AAAA\\ay\nlast \\x9b line\n"; out.String() != want {
		t.Errorf("relayed %q, want %q", out.String(), want)
	}
	if got := tw.Last(); got != "last \x9b line" {
		t.Errorf("last line %q (raw: say escapes it)", got)
	}
}
