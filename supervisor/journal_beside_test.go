package supervisor

import (
	"errors"
	"os"
	"testing"
)

// TestJournalBeside: for a runtime whose intent finds its boxes, the
// created and started writes return before their fsync (the engine's
// next step runs beside them), land in order, and the next journal
// waits for them and reports a failed one; elsewhere they are written
// before journalBeside returns.
func TestJournalBeside(t *testing.T) {
	j, err := OpenJournal(t.TempDir(), "ci")
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var synced []string
	defer func(f func(*os.File) error) { fsync = f }(fsync)
	fsync = func(f *os.File) error {
		<-gate
		synced = append(synced, f.Name())
		return f.Sync()
	}
	newLaunch := func(id string, beside bool) *launch {
		return &launch{j: j, box: &Box{Name: "dw-" + id, State: map[string]string{}}, beside: beside,
			entry: &JournalEntry{LaunchID: id, Instance: "ci", Box: "dw-" + id, Runtime: "docker", Nonce: "n"}}
	}
	l := newLaunch("20260101-000000-beside", true)
	if err := l.journalBeside(StateCreated); err != nil { // the fsync is held: it returned before it
		t.Fatal(err)
	}
	if len(synced) != 0 {
		t.Fatalf("journalBeside waited for its fsync: %v", synced)
	}
	close(gate)
	if err := l.journalBeside(StateStarted); err != nil {
		t.Fatal(err)
	}
	if err := l.settle(); err != nil {
		t.Fatal(err)
	}
	if e, err := j.Get(l.entry.LaunchID); err != nil || e.State != StateStarted {
		t.Fatalf("after created and started: %+v %v", e, err)
	}
	// A write in flight that fails is reported by the next journal,
	// which still writes its own state.
	l.pending = make(chan error, 1)
	l.pending <- errors.New("disk full")
	if err := l.journal(StateRemoving); err == nil || err.Error() != "disk full" {
		t.Errorf("journal after a failed write in flight: %v", err)
	}
	if e, err := j.Get(l.entry.LaunchID); err != nil || e.State != StateRemoving {
		t.Errorf("after removing: %+v %v", e, err)
	}
	// Not beside: written when journalBeside returns.
	o := newLaunch("20260101-000000-inline", false)
	if err := o.journalBeside(StateCreated); err != nil || o.pending != nil {
		t.Fatalf("inline: %v, pending %v", err, o.pending)
	}
	if e, err := j.Get(o.entry.LaunchID); err != nil || e.State != StateCreated {
		t.Errorf("inline created: %+v %v", e, err)
	}
}
