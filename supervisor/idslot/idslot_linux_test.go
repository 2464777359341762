package idslot

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestRanges(t *testing.T) {
	etc := t.TempDir()
	// A subordinate range in slot 1, and an account in slot 3.
	os.WriteFile(filepath.Join(etc, "subuid"), []byte("alice:2147549184:65536\n"), 0o644)
	os.WriteFile(filepath.Join(etc, "passwd"), []byte("odd:x:2147680300:1::/:/bin/sh\n"), 0o644)
	r := Root(filepath.Join(t.TempDir(), "ranges"), etc)
	slotStart := r.slotStart
	var got []int64
	for _, box := range []string{"a", "b", "c"} {
		s, err := r.Allocate(box)
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
	if err := r.Release("x", got[1]); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Allocate("d"); s != slotStart(5) {
		t.Fatalf("after a stranger's release: %d, want slot 5", s)
	}
	if err := r.Release("b", got[1]); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Allocate("e"); s != slotStart(2) {
		t.Fatalf("after b's release: %d, want slot 2 again", s)
	}
	// A box whose state lost its range (killed before the journal
	// entry) is found by name.
	if err := r.ReleaseAll("a"); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Allocate("f"); s != slotStart(0) {
		t.Fatalf("after releaseAll(a): %d, want slot 0 again", s)
	}
	if err := r.Release("b", 12345); err == nil {
		t.Errorf("a start outside the block is released without complaint")
	}
}

// A slot is taken back only when its holder is provably gone: the
// supervisor that took it has ended, and so has the box's init when one
// was recorded. A live holder, or a file that names no supervisor, is
// never taken back.
func TestSlotReclaim(t *testing.T) {
	r := Root(filepath.Join(t.TempDir(), "ranges"), t.TempDir())
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := dead.Process.Pid
	self, err := selfLine()
	if err != nil {
		t.Fatal(err)
	}
	alive := strings.Replace(self, "owner", "init", 1)
	gone := fmt.Sprintf("owner %d 1\n", deadPID)
	if _, err := r.Allocate("first"); err != nil {
		t.Fatal(err)
	}
	files := map[int]string{
		1: "crashed\n" + gone,                                     // supervisor gone, never started
		2: "running\n" + gone + alive,                             // supervisor gone, init alive
		3: "starting\n" + self,                                    // supervisor alive
		4: "old-format\n",                                         // names no supervisor
		5: "ended\n" + gone + fmt.Sprintf("init %d 1\n", deadPID), // both gone
		6: "engine-has\n" + gone + engineHeldLine + "\n",          // supervisor gone, the engine still has the box
		7: "engine-gone\n" + gone + engineHeldLine + "\n",         // supervisor gone, the engine has it no more
		8: "engine-mute\n" + gone + engineHeldLine + "\n",         // supervisor gone, the engine cannot say
	}
	for i, c := range files {
		if err := os.WriteFile(filepath.Join(r.dir, strconv.Itoa(i)), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r.EngineHas = func(box string) (bool, error) {
		switch box {
		case "engine-has":
			return true, nil
		case "engine-gone":
			return false, nil
		}
		return false, errors.New("no answer")
	}
	s, err := r.Allocate("next")
	if err != nil {
		t.Fatal(err)
	}
	if s != r.slotStart(1) {
		t.Errorf("next box got slot %d, want 1 (its supervisor is gone, it never started)", r.SlotOf(s))
	}
	for i, want := range map[int]bool{2: true, 3: true, 4: true, 5: false, 6: true, 7: false, 8: true} {
		_, err := os.Stat(filepath.Join(r.dir, strconv.Itoa(i)))
		if got := err == nil; got != want {
			t.Errorf("slot %d (%q) still held: %v, want %v", i, files[i], got, want)
		}
	}
	// The init is recorded, and then the slot is held while it runs.
	if err := r.Started("next", s, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(r.dir, "1"))
	if h := parseHolder(b); h.box != "next" || h.initPID != os.Getpid() || h.owner != os.Getpid() || h.gone(nil) {
		t.Errorf("slot 1 after started: %q -> %+v", b, h)
	}
	if err := r.Started("stranger", s, os.Getpid()); err == nil {
		t.Errorf("a stranger recorded its init in another box's slot")
	}
}

// An engine-held slot whose supervisor is gone is kept unless the
// engine says it no longer has the box (without an engine to ask, it is
// kept); EngineHeld, like Started, is refused in another box's slot.
func TestSlotEngineHeld(t *testing.T) {
	r := Root(filepath.Join(t.TempDir(), "ranges"), t.TempDir())
	s, err := r.Allocate("box")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.EngineHeld("stranger", s); err == nil {
		t.Errorf("a stranger marked another box's slot")
	}
	if err := r.EngineHeld("box", s); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(r.dir, "0"))
	h := parseHolder(b)
	if !h.engineHeld || h.initPID != 0 || h.gone(nil) {
		t.Fatalf("after EngineHeld, its supervisor alive: %+v", h)
	}
	h.owner, h.ownerStart = 1<<22, 1 // the supervisor is gone
	asked := ""
	has := func(v bool) func(string) (bool, error) {
		return func(box string) (bool, error) { asked = box; return v, nil }
	}
	if h.gone(nil) || h.gone(has(true)) {
		t.Errorf("a slot whose box the engine may still have was taken back")
	}
	if !h.gone(has(false)) || asked != "box" {
		t.Errorf("a slot whose box the engine no longer has is kept (asked for %q)", asked)
	}
}

func TestParseSubIDLine(t *testing.T) {
	for _, c := range []struct {
		line       string
		start, cnt int
		ok         bool
	}{
		{"dwtest:100000:65536", 100000, 65536, true},
		{"2345:300000:65536", 300000, 65536, true},
		{"other:100000:65536", 0, 0, false},
		{"dwtest:100000", 0, 0, false},
		{"dwtest:x:65536", 0, 0, false},
		{"dwtest:100000:0", 0, 0, false},
	} {
		s, n, ok := parseSubIDLine(c.line, "dwtest", 2345)
		if s != c.start || n != c.cnt || ok != c.ok {
			t.Errorf("parseSubIDLine(%q) = %d, %d, %v", c.line, s, n, ok)
		}
	}
}

// Only narrows which slots Allocate takes; the whole range still knows
// them: it never hands them out again, releases and holds them.
func TestOnly(t *testing.T) {
	all := Sub(filepath.Join(t.TempDir(), "slots"), 1000, 5000, 2, 8, "test range")
	odd := all.Only(func(u, g int64) bool { return g-5000 == u-1000 && (u-1000)/2%2 == 1 })
	if n := odd.Takeable(); n != 4 {
		t.Errorf("takeable %d, want 4 (slots 1, 3, 5, 7)", n)
	}
	a, err := odd.Allocate("a")
	if err != nil || a != 1002 || all.GIDStart(a) != 5002 {
		t.Fatalf("first narrowed slot %d (%v), want 1002 (gid 5002)", a, err)
	}
	for _, want := range []int64{1000, 1004} {
		if s, err := all.Allocate("w"); err != nil || s != want {
			t.Fatalf("the whole range gave %d (%v), want %d (slot 1 is held)", s, err, want)
		}
	}
	if !all.Holds("a", "1002") {
		t.Errorf("the whole range does not see a's slot")
	}
	if err := all.Release("a", a); err != nil {
		t.Fatal(err)
	}
	if s, _ := odd.Allocate("b"); s != 1002 {
		t.Errorf("after the release: %d, want slot 1 again", s)
	}
}
