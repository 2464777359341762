package hostcheck

import (
	"sync"
	"time"
)

// A busy host delays every hop of the kill chain — the watcher's timer,
// its kill, the victims' exit, the prover's poll — by as long as the
// scheduler makes a woken thread wait. prove-deathwatch measures that
// wait during each trial (the prover's own wake-ups, hostDelayPeriod
// apart) and allows a trial hopsAllowed times the worst of it on top of
// the bound: on an idle host the allowance is small and the bound is
// what it says; on a busy one the report shows how much of a late trial
// the host itself took. --strict turns it off.
const (
	hopsAllowed     = 4
	hostDelayPeriod = time.Millisecond
)

// hostDelay measures the worst wake-up delay until stop is called.
type hostDelay struct {
	stopOnce sync.Once
	stop     chan struct{}
	done     chan time.Duration
	worst    time.Duration
}

func startHostDelay() *hostDelay {
	h := &hostDelay{stop: make(chan struct{}), done: make(chan time.Duration, 1)}
	go func() {
		var worst time.Duration
		t := time.NewTimer(hostDelayPeriod)
		defer t.Stop()
		for {
			want := time.Now().Add(hostDelayPeriod)
			t.Reset(hostDelayPeriod)
			select {
			case <-h.stop:
				h.done <- worst
				return
			case now := <-t.C:
				worst = max(worst, now.Sub(want), time.Since(want))
			}
		}
	}()
	return h
}

// Stop ends the measurement and returns the worst delay seen; later
// calls return the same.
func (h *hostDelay) Stop() time.Duration {
	h.stopOnce.Do(func() {
		close(h.stop)
		h.worst = <-h.done
	})
	return h.worst
}
