package supervisor

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"deathwatch/supervisor/controller"
	"deathwatch/supervisor/proc"
)

func TestOwnerState(t *testing.T) {
	ctrl := &ControllerRecord{Link: controller.LinkDetached, Owner: Owner{PID: 42, StartTime: 7}}
	unknown := &ControllerRecord{Link: controller.LinkFD}
	for _, c := range []struct {
		name                string
		ownerGone, ctrlGone bool
		ctrl                *ControllerRecord
		want                string
	}{
		{"owner gone", true, true, ctrl, OwnerGone},
		{"owner gone, no controller journaled", true, false, nil, OwnerGone},
		{"owner and controller alive", false, false, ctrl, OwnerAlive},
		{"owner alive, controller gone: an orphan", false, true, ctrl, OwnerOrphan},
		{"owner alive, no controller journaled (a library caller)", false, true, nil, OwnerAlive},
		{"owner alive, the controller a descriptor's other end", false, true, unknown, OwnerAlive},
	} {
		if got := ownerState(c.ownerGone, c.ctrl, c.ctrlGone); got != c.want {
			t.Errorf("%s: ownerState = %s, want %s", c.name, got, c.want)
		}
	}
}

func TestControllerRecord(t *testing.T) {
	owner := Owner{PID: 10, StartTime: 3, BootID: "b", PIDNS: 9}
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
	j, err := OpenJournal(t.TempDir(), "ci")
	if err != nil {
		t.Fatal(err)
	}
	me, _ := SelfOwner()
	e := &JournalEntry{LaunchID: "20260101-000000-cc", Instance: "ci", Box: "dw-c", Runtime: "docker", Nonce: "n", Owner: me,
		Controller: &ControllerRecord{Link: controller.LinkParent, Owner: Owner{PID: 42, StartTime: 5, BootID: me.BootID}}, State: StateIntent}
	if err := j.Put(e); err != nil {
		t.Fatal(err)
	}
	got, err := j.Get(e.LaunchID)
	if err != nil || got.Controller == nil || *got.Controller != *e.Controller || got.Owner != me {
		t.Fatalf("read back %+v (%v), want controller %+v beside owner %+v", got, err, e.Controller, me)
	}
}

// sleeper is a running process as an Owner record (a stand-in
// supervisor that dies of SIGTERM).
func sleeper(t *testing.T) (Owner, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	st, err := proc.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return Owner{PID: cmd.Process.Pid, StartTime: st, BootID: proc.BootID()}, cmd
}

// TestReconcileOrphan: an owner alive whose journaled controller is dead
// is ended and its box removed; one whose controller lives is left
// alone, and so is its box.
func TestReconcileOrphan(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenJournal(dir, "o")
	if err != nil {
		t.Fatal(err)
	}
	me, _ := SelfOwner()
	dead := deadOwnerRecord(t)
	orphan, orphanCmd := sleeper(t)
	kept, _ := sleeper(t)
	exited := make(chan struct{})
	go func() { orphanCmd.Wait(); close(exited) }()
	theMem.boxes = map[string]Listed{}
	theMem.removed = nil
	for _, c := range []struct {
		launch string
		owner  Owner
		ctrl   Owner
	}{{"orphan", orphan, dead}, {"kept", kept, me}} {
		if err := j.Put(&JournalEntry{LaunchID: c.launch, Instance: "o", Box: "dw-" + c.launch, Runtime: "memrt", Nonce: "n",
			Labels: labelsFor("o", c.launch, "n"), Owner: c.owner, Controller: &ControllerRecord{Link: controller.LinkDetached, Owner: c.ctrl},
			State: StateStarted, Created: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
		theMem.boxes["dw-"+c.launch] = Listed{Name: "dw-" + c.launch, Labels: labelsFor("o", c.launch, "n"), Running: true}
	}
	rep, err := Reconcile(context.Background(), ReconcileOptions{Instance: "o", JournalDir: dir, Runtimes: []string{"memrt"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the orphan owner was not ended")
	}
	if len(rep.Removed) != 1 || rep.Removed[0].LaunchID != "orphan" || rep.Removed[0].Owner != OwnerOrphan || !strings.Contains(rep.Removed[0].Reason, "orphan") {
		t.Errorf("removed %+v, want the orphan's box, owner orphan", rep.Removed)
	}
	if len(rep.Blocked) != 1 || rep.Blocked[0].LaunchID != "kept" || rep.Blocked[0].Owner != OwnerAlive {
		t.Errorf("blocked %+v, want the live controller's box, owner alive", rep.Blocked)
	}
	if strings.Join(theMem.removed, ",") != "dw-orphan" {
		t.Errorf("runtime removed %v, want dw-orphan alone", theMem.removed)
	}
	if !(Owner{PID: kept.PID, StartTime: kept.StartTime, BootID: kept.BootID}).Alive() {
		t.Error("the owner whose controller lives was ended")
	}
}
