package watcher

import (
	"sync"
	"time"
)

// alarm is a timer whose channel carries no time.Time. A time.Timer
// hands its chan time.Time to the runtime as an interface value, which
// keeps every method of time.Time a call through an interface could
// reach: time.Time.String, and with it time's formatting and the time
// zone loader (the tz database's parser, its zip reader): ~40 KB of
// code and their tables in the PID-1 binary, all resident. An alarm is
// a time.AfterFunc whose function fires the channel.
type alarm struct {
	// C receives once when the alarm goes off; never after Stop, nor
	// for an arming that Reset replaced.
	C chan struct{}

	mu      sync.Mutex
	t       *time.Timer
	at      time.Time // when the current arming goes off
	stopped bool
}

// newAlarm returns an alarm that goes off once d from now.
func newAlarm(d time.Duration) *alarm {
	a := &alarm{C: make(chan struct{}, 1), at: time.Now().Add(d)}
	a.t = time.AfterFunc(d, a.fire)
	return a
}

// after is time.After for an alarm.
func after(d time.Duration) <-chan struct{} { return newAlarm(d).C }

// fire runs when the runtime's timer goes off. An earlier arming's
// function may run late, after a Reset: it finds the new arming not
// yet due and does nothing (time.Now and at compare on the monotonic
// clock).
func (a *alarm) fire() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped || time.Now().Before(a.at) {
		return
	}
	select {
	case a.C <- struct{}{}:
	default:
	}
}

// Reset arms the alarm anew, d from now, dropping a going-off of the
// previous arming that was not received.
func (a *alarm) Reset(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = false
	a.at = time.Now().Add(d)
	a.t.Reset(d)
	select {
	case <-a.C:
	default:
	}
}

// Stop disarms the alarm: C receives nothing more.
func (a *alarm) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	a.t.Stop()
	select {
	case <-a.C:
	default:
	}
}
