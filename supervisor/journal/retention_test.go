package journal

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func putEntry(t *testing.T, j *Journal, id, state string) *Entry {
	t.Helper()
	e := &Entry{LaunchID: id, Instance: "ci", Box: "dw-" + id, Runtime: "docker", Nonce: "n", State: state, Created: time.Now()}
	if err := j.Put(e); err != nil {
		t.Fatal(err)
	}
	return e
}

func ids(es []*Entry) []string {
	var s []string
	for _, e := range es {
		s = append(s, e.LaunchID)
	}
	return s
}

// A closed entry leaves the open folder: ListOpen reads the open ones
// alone, List and Get still find the closed one.
func TestClosedEntriesApart(t *testing.T) {
	j, err := Open(t.TempDir(), "ci", nil)
	if err != nil {
		t.Fatal(err)
	}
	putEntry(t, j, "a", StateStarted)
	b := putEntry(t, j, "b", StateStarted)
	b.State = StateRemoved
	if err := j.Put(b); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(j.Dir(), "b.json")); !os.IsNotExist(err) {
		t.Errorf("closed entry b still in the open folder (%v)", err)
	}
	open, bad, err := j.ListOpen()
	if err != nil || len(bad) != 0 || fmt.Sprint(ids(open)) != "[a]" {
		t.Errorf("ListOpen: %v %v %v, want [a]", ids(open), bad, err)
	}
	all, bad, err := j.List()
	if err != nil || len(bad) != 0 || fmt.Sprint(ids(all)) != "[a b]" {
		t.Errorf("List: %v %v %v, want [a b]", ids(all), bad, err)
	}
	if got, err := j.Get("b"); err != nil || got.State != StateRemoved {
		t.Errorf("Get(b): %+v %v", got, err)
	}
}

// A kill between the closing write and the removal of the open entry
// leaves both: the closed one wins and the open one is removed. A
// closed entry in the open folder (an older journal) moves to closed/.
func TestListOpenFinishesCloses(t *testing.T) {
	j, err := Open(t.TempDir(), "ci", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := putEntry(t, j, "c", StateRemoving)
	stale, _ := os.ReadFile(filepath.Join(j.Dir(), "c.json"))
	c.State = StateRemoved
	if err := j.Put(c); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(j.Dir(), "c.json"), stale, 0o600)
	old, _ := json.Marshal(&Entry{LaunchID: "d", Instance: "ci", State: StateRemoved})
	os.WriteFile(filepath.Join(j.Dir(), "d.json"), old, 0o600)

	open, bad, err := j.ListOpen()
	if err != nil || len(bad) != 0 || len(open) != 0 {
		t.Errorf("ListOpen: %v %v %v, want none", ids(open), bad, err)
	}
	for _, id := range []string{"c", "d"} {
		if _, err := os.Stat(filepath.Join(j.Dir(), id+".json")); !os.IsNotExist(err) {
			t.Errorf("%s.json still in the open folder (%v)", id, err)
		}
		if got, err := j.Get(id); err != nil || got.State != StateRemoved {
			t.Errorf("Get(%s): %+v %v", id, got, err)
		}
	}
}

// Prune removes closed entries older than its age and leaves the
// younger ones and every open one.
func TestPrune(t *testing.T) {
	j, err := Open(t.TempDir(), "ci", nil)
	if err != nil {
		t.Fatal(err)
	}
	putEntry(t, j, "open", StateStarted)
	for _, id := range []string{"old", "young"} {
		e := putEntry(t, j, id, StateStarted)
		e.State = StateRemoved
		if err := j.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-48 * time.Hour)
	os.Chtimes(j.closedPath("old"), long, long)
	n, err := j.Prune(DefaultRetention, time.Now())
	if err != nil || n != 1 {
		t.Fatalf("Prune: %d %v, want 1", n, err)
	}
	all, _, _ := j.List()
	if fmt.Sprint(ids(all)) != "[open young]" {
		t.Errorf("after Prune: %v, want [open young]", ids(all))
	}
}

// A closing write prunes only when the last prune is more than
// pruneEvery ago.
func TestClosingWritePrunesHourly(t *testing.T) {
	j, err := Open(t.TempDir(), "ci", nil)
	if err != nil {
		t.Fatal(err)
	}
	closeOne := func(id string) {
		e := putEntry(t, j, id, StateStarted)
		e.State = StateRemoved
		if err := j.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	closeOne("a")
	long := time.Now().Add(-48 * time.Hour)
	os.Chtimes(j.closedPath("a"), long, long)
	closeOne("b") // the marker is fresh from a's close: no prune
	if _, err := j.Get("a"); err != nil {
		t.Fatalf("a pruned although the last prune was just now: %v", err)
	}
	marker := filepath.Join(j.Dir(), closedDir, pruneMarker)
	due := time.Now().Add(-pruneEvery - time.Minute)
	os.Chtimes(marker, due, due)
	closeOne("c")
	if _, err := j.Get("a"); err == nil {
		t.Error("a kept although older than the retention and the prune was due")
	}
	for _, id := range []string{"b", "c"} {
		if _, err := j.Get(id); err != nil {
			t.Errorf("%s pruned: %v", id, err)
		}
	}
}

// BenchmarkPruneCheck is what every closing write pays for retention
// when no prune is due: one stat of the marker.
func BenchmarkPruneCheck(b *testing.B) {
	j, err := Open(b.TempDir(), "ci", nil)
	if err != nil {
		b.Fatal(err)
	}
	os.MkdirAll(filepath.Join(j.Dir(), closedDir), 0o700)
	j.pruneIfDue(time.Now())
	now := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j.pruneIfDue(now)
	}
}

// BenchmarkClose is a Volatile launch's last two writes (no fsync):
// removing, then the closing write into the closed folder with its
// prune check.
func BenchmarkClose(b *testing.B) {
	j, err := Open(b.TempDir(), "ci", func(string) bool { return true })
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		e := &Entry{LaunchID: fmt.Sprintf("l%d", i), Instance: "ci", Box: "dw", Runtime: "docker", Nonce: "n", State: StateRemoving}
		if err := j.Put(e); err != nil {
			b.Fatal(err)
		}
		e.State = StateRemoved
		if err := j.Put(e); err != nil {
			b.Fatal(err)
		}
	}
}
