package journal

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestJournalRoundTrip(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, "ci", nil)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := SelfOwner()
	if err != nil {
		t.Fatal(err)
	}
	e := &Entry{LaunchID: "20260101-000000-aa", Instance: "ci", Box: "dw-x", Runtime: "docker", Nonce: "n", Owner: owner, State: StateIntent}
	if err := j.Put(e); err != nil {
		t.Fatal(err)
	}
	e.State = StateRemoved
	if err := j.Put(e); err != nil {
		t.Fatal(err)
	}
	// A temp file left by a write that was killed is not an entry.
	os.WriteFile(filepath.Join(j.Dir(), ".20260101-000000-bb.json.tmp-123"), []byte("{"), 0o600)
	es, bad, err := j.List()
	if err != nil || len(bad) != 0 || len(es) != 1 {
		t.Fatalf("list: %v %v %d", err, bad, len(es))
	}
	if es[0].State != StateRemoved || es[0].Open() || es[0].Nonce != "n" {
		t.Errorf("entry %+v", es[0])
	}
	got, err := j.Get(e.LaunchID)
	if err != nil || got.Box != "dw-x" {
		t.Errorf("get: %+v %v", got, err)
	}
	if fi, _ := os.Stat(j.Dir()); fi.Mode().Perm() != 0o700 {
		t.Errorf("journal dir mode %v", fi.Mode())
	}
	if _, err := Open(dir, "../x", nil); err == nil {
		t.Error("instance ../x accepted")
	}
	if err := j.Put(&Entry{LaunchID: "../../etc/x"}); err == nil {
		t.Error("launch id ../../etc/x accepted")
	}
}

func TestOwnerAlive(t *testing.T) {
	me, err := SelfOwner()
	if err != nil {
		t.Fatal(err)
	}
	if !me.Alive() {
		t.Error("own process not alive")
	}
	other := me
	other.StartTime++
	if other.Alive() {
		t.Error("same pid with another start time counted as alive")
	}
	if (Owner{PID: 0}).Alive() {
		t.Error("pid 0 alive")
	}
	reboot := me
	reboot.BootID = "another-boot"
	if reboot.Alive() {
		t.Error("owner from another boot alive")
	}
}

// TestJournalFsyncs: a launch's writes fsync every entry's data but the
// closing write's, and the folder only for the intent write (see Put); a Volatile runtime's box
// (nothing of it survives a power loss, and the page cache keeps its
// entry over the supervisor's death) none at all. Each state reads back.
func TestJournalFsyncs(t *testing.T) {
	volatile := func(rt string) bool { return rt == "volatilert" }
	j, err := Open(t.TempDir(), "ci", volatile)
	if err != nil {
		t.Fatal(err)
	}
	var files, dirs int
	defer func(f func(*os.File) error) { fsync = f }(fsync)
	fsync = func(f *os.File) error {
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			dirs++
		} else {
			files++
		}
		return f.Sync()
	}
	for _, rt := range []string{"docker", "volatilert"} {
		total := 0
		e := &Entry{LaunchID: "20260101-000000-" + rt, Instance: "ci", Box: "dw-y", Runtime: rt, Nonce: "n"}
		for _, st := range []string{StateIntent, StateCreated, StateStarted, StateRemoving, StateRemoved} {
			files, dirs = 0, 0
			e.State = st
			if err := j.Put(e); err != nil {
				t.Fatal(err)
			}
			wantFiles, wantDirs := 1, 0
			switch st {
			case StateIntent:
				wantDirs = 1
			case StateRemoved: // the closing write: its box is gone (see Put)
				wantFiles = 0
			}
			if rt == "volatilert" {
				wantFiles, wantDirs = 0, 0
			}
			if files != wantFiles || dirs != wantDirs {
				t.Errorf("%s %s: %d file and %d folder fsyncs, want %d and %d", rt, st, files, dirs, wantFiles, wantDirs)
			}
			total += files + dirs
			if got, err := j.Get(e.LaunchID); err != nil || got.State != st {
				t.Errorf("%s %s: read back %+v, %v", rt, st, got, err)
			}
		}
		t.Logf("%s: %d fsyncs a launch", rt, total)
	}
}

// TestValidNameIsThePattern: the hand-written ValidName accepts what
// the pattern it replaced accepts, and nothing else.
func TestValidNameIsThePattern(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	cases := []string{"", "a", "A9", "_a", ".a", "-a", "a_b.c-d", "a b", "a/b", "ä", "a\x00", "20261130-210413-d77ec619",
		strings.Repeat("a", 128), strings.Repeat("a", 129), "a" + strings.Repeat("-", 127), "a" + strings.Repeat("-", 128)}
	alphabet := "aZ09_.-/ é\x00"
	for i := 0; i < 5000; i++ {
		n := i % 9
		b := make([]byte, n)
		for k := range b {
			b[k] = alphabet[(i*7+k*13+i/9)%len(alphabet)]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := ValidName(s), re.MatchString(s); got != want {
			t.Errorf("ValidName(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}
