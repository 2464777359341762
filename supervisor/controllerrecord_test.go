package supervisor

import (
	"deathwatch/supervisor/journal"
	"testing"

	"deathwatch/supervisor/controller"
)

func TestControllerRecord(t *testing.T) {
	owner := journal.Owner{PID: 10, StartTime: 3, BootID: "b", PIDNS: 9}
	if r := controllerRecord(nil, owner); r != nil {
		t.Errorf("no watch recorded as %+v", r)
	}
	r := controllerRecord(&controller.Watch{Link: controller.LinkParent, PID: 42, StartTime: 5}, owner)
	if r.Link != controller.LinkParent || r.PID != 42 || r.StartTime != 5 || r.BootID != "b" || r.PIDNS != 9 {
		t.Errorf("parent recorded as %+v", r)
	}
	if r := controllerRecord(&controller.Watch{Link: controller.LinkFD}, owner); r.Link != controller.LinkFD || r.PID != 0 {
		t.Errorf("fd recorded as %+v: the descriptor's other end has no pid", r)
	}
}

// TestJournalController: the controller record reads back beside the
// owner.
func TestJournalController(t *testing.T) {
	j, err := journal.Open(t.TempDir(), "ci", nil)
	if err != nil {
		t.Fatal(err)
	}
	me, _ := journal.SelfOwner()
	e := &journal.Entry{LaunchID: "20260101-000000-cc", Instance: "ci", Box: "dw-c", Runtime: "docker", Nonce: "n", Owner: me,
		Controller: &journal.ControllerRecord{Link: controller.LinkParent, Owner: journal.Owner{PID: 42, StartTime: 5, BootID: me.BootID}}, State: journal.StateIntent}
	if err := j.Put(e); err != nil {
		t.Fatal(err)
	}
	got, err := j.Get(e.LaunchID)
	if err != nil || got.Controller == nil || *got.Controller != *e.Controller || got.Owner != me {
		t.Fatalf("read back %+v (%v), want controller %+v beside owner %+v", got, err, e.Controller, me)
	}
}
