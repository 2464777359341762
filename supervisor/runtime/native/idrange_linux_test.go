package native

import (
	"os"
	"path/filepath"
	"testing"
)

func TestIDRanges(t *testing.T) {
	etc := t.TempDir()
	// A subordinate range in slot 1, and an account in slot 3.
	os.WriteFile(filepath.Join(etc, "subuid"), []byte("alice:2147549184:65536\n"), 0o644)
	os.WriteFile(filepath.Join(etc, "passwd"), []byte("odd:x:2147680300:1::/:/bin/sh\n"), 0o644)
	r := &idRanges{dir: filepath.Join(t.TempDir(), "ranges"), taken: hostIDSpans(etc)}
	var got []int64
	for _, box := range []string{"a", "b", "c"} {
		s, err := r.allocate(box)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	want := []int64{slotStart(0), slotStart(2), slotStart(4)}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ranges %v, want %v (slots 1 and 3 overlap host ids)", got, want)
		}
	}
	// Another box's slot is not released by a stranger's name.
	if err := r.release("x", got[1]); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.allocate("d"); s != slotStart(5) {
		t.Fatalf("after a stranger's release: %d, want slot 5", s)
	}
	if err := r.release("b", got[1]); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.allocate("e"); s != slotStart(2) {
		t.Fatalf("after b's release: %d, want slot 2 again", s)
	}
	// A box whose state lost its range (killed before the journal
	// entry) is found by name.
	if err := r.releaseAll("a"); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.allocate("f"); s != slotStart(0) {
		t.Fatalf("after releaseAll(a): %d, want slot 0 again", s)
	}
	if err := r.release("b", 12345); err == nil {
		t.Errorf("a start outside the block is released without complaint")
	}
}
