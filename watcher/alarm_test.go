package watcher

import (
	"testing"
	"time"
)

// ceiling is the longest an alarm may take to go off on a loaded host.
const ceiling = 10 * time.Second

// No timing is asserted: only that an alarm goes off (within a
// generous ceiling), once, and never after Stop or for a replaced
// arming.

func TestAlarmGoesOffOnce(t *testing.T) {
	a := newAlarm(10 * time.Millisecond)
	select {
	case <-a.C:
	case <-time.After(ceiling):
		t.Fatal("the alarm did not go off")
	}
	select {
	case <-a.C:
		t.Fatal("the alarm went off twice for one arming")
	case <-time.After(50 * time.Millisecond):
	}
}

func TestAlarmResetDropsTheEarlierArming(t *testing.T) {
	a := newAlarm(time.Millisecond)
	time.Sleep(20 * time.Millisecond) // gone off: C holds it
	a.Reset(time.Hour)
	a.fire() // an earlier arming's function, running late
	select {
	case <-a.C:
		t.Fatal("C received after Reset, for the arming Reset replaced")
	case <-time.After(50 * time.Millisecond):
	}
	a.Reset(time.Millisecond)
	select {
	case <-a.C:
	case <-time.After(ceiling):
		t.Fatal("the alarm did not go off after Reset")
	}
}

func TestAlarmStop(t *testing.T) {
	a := newAlarm(time.Millisecond)
	a.Stop()
	a.fire()
	select {
	case <-a.C:
		t.Fatal("C received after Stop")
	case <-time.After(50 * time.Millisecond):
	}
}
