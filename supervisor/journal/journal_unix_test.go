//go:build unix

package journal

import (
	"os"
	"strings"
	"testing"
)

func TestOpenJournalRefusesUntrusted(t *testing.T) {
	if _, err := Open("", "ci", nil); err == nil || !strings.Contains(err.Error(), "--journal") {
		t.Errorf("no journal folder: %v, want it to ask for --journal", err)
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	if _, err := Open(dir, "ci", nil); err == nil || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("a journal below a 0777 folder: %v", err)
	}
}
