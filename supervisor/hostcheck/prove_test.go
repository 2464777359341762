package hostcheck

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"deathwatch/supervisor"
)

func init() {
	supervisor.Register(supervisor.Descriptor{Name: "vmrt", Caps: supervisor.CapNoHostProcesses, ImageWatcher: "/w-in-image", Bounds: supervisor.Bounds{Dead: time.Second, Removed: time.Second},
		New: func(supervisor.RuntimeConfig) (supervisor.Runtime, error) { return nil, nil }})
}

func TestStandinArgs(t *testing.T) {
	o := &ProveOptions{Instance: "i.prove", JournalDir: "/j", Runtime: "docker", Image: "img", AllowRootful: true,
		Watcher: "/w", Heartbeat: 300 * time.Millisecond, Deadline: time.Second, Grace: 500 * time.Millisecond}
	base := []string{"--instance", "i.prove", "--journal", "/j", "--log-level", "warn", "exec", "--runtime", "docker", "--events", "fd:3",
		"--image", "img", "--allow-rootful", "--watcher", "/w"}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{PathSIGKILL, append(append([]string{}, base...), "--", "sh", "-c", proveAgent)},
		{PathHeartbeat, append(append([]string{}, base...), "--heartbeat", "300ms", "--", "sh", "-c", proveAgent)},
		{PathDeadline, append(append([]string{}, base...), "--deadline", "1s", "--grace", "500ms", "--", "sh", "-c", proveAgentDeadline)},
	} {
		if got := standinArgs(o, tc.path); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.path, got, tc.want)
		}
	}
	// The controller path: sh runs the same exec as its child.
	if got, want := controllerArgs("/sup", []string{"exec", "x"}), []string{"-c", `"$@"; exit $?`, "sh", "/sup", "exec", "x"}; !reflect.DeepEqual(got, want) {
		t.Errorf("controller stand-in %q, want %q", got, want)
	}
	// A runtime whose processes the host cannot see: the agent carries
	// the marker; the image's watcher, never the host's.
	vm := strings.Join(standinArgs(&ProveOptions{Instance: "i", JournalDir: "/j", Runtime: "vmrt", Watcher: "/w"}, PathSIGKILL), " ")
	if strings.Contains(vm, "--watcher") || !strings.Contains(vm, "--env "+proveMarkerEnv+" --") {
		t.Errorf("vmrt: %s", vm)
	}
	n := &ProveOptions{Instance: "i", JournalDir: "/j", Runtime: "native", WatcherInImage: "/usr/local/bin/watcher", Watcher: "/w"}
	got := strings.Join(standinArgs(n, PathSIGKILL), " ")
	if strings.Contains(got, "--image") || strings.Contains(got, "--allow-rootful") || strings.Contains(got, "--watcher /w") || !strings.Contains(got, "--watcher-in-image /usr/local/bin/watcher") {
		t.Errorf("native: %s", got)
	}
}

func TestProveBounds(t *testing.T) {
	o := &ProveOptions{Bounds: supervisor.Bounds{Dead: 250 * time.Millisecond, Removed: 2 * time.Second}, Heartbeat: 300 * time.Millisecond, Deadline: time.Second, Grace: 500 * time.Millisecond}
	for _, tc := range []struct {
		path          string
		dead, removed time.Duration
	}{
		{PathSIGKILL, 250 * time.Millisecond, 2 * time.Second},
		{PathHeartbeat, 550 * time.Millisecond, 2300 * time.Millisecond},
		{PathDeadline, 1750 * time.Millisecond, 3500 * time.Millisecond},
	} {
		if d, _ := o.deadBound(tc.path); d != tc.dead {
			t.Errorf("%s dead bound %v, want %v", tc.path, d, tc.dead)
		}
		if d, _ := o.removedBound(tc.path); d != tc.removed {
			t.Errorf("%s removed bound %v, want %v", tc.path, d, tc.removed)
		}
	}
	for _, d := range supervisor.Descriptors() {
		if b := d.Bounds; b.Dead <= 0 || b.Removed < b.Dead {
			t.Errorf("%s default bounds %+v", d.Name, b)
		}
	}
}

func TestProveRow(t *testing.T) {
	r := ProveRow{Bound: 10 * time.Millisecond, BoundStr: "10ms", Pass: true}
	for i, d := range []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10} {
		r.record(i, d*time.Millisecond, "", 0, 0)
	}
	r.finish()
	if !r.Pass || r.P50 != 6*time.Millisecond || r.P95 != 10*time.Millisecond || r.Max != 10*time.Millisecond || r.N != 10 {
		t.Errorf("row %+v", r)
	}
	// Over the bound by less than the allowance for the host's own
	// wake-up delay: a pass, listed as such; by more: a failure.
	r.record(10, 11*time.Millisecond, "", 500*time.Microsecond, 2*time.Millisecond)
	if !r.Pass || len(r.Loaded) != 1 || !strings.Contains(r.Loaded[0], "exceeds the bound 10ms by 1ms, within 4 × the host's wake-up delay of 500µs") {
		t.Errorf("over the bound on a busy host: %+v", r)
	}
	if r.HostDelay != 500*time.Microsecond {
		t.Errorf("host delay %v", r.HostDelay)
	}
	r.record(11, 11*time.Millisecond, "", 0, 0)
	if r.Pass || !strings.Contains(r.Failures[0], "exceeds the bound 10ms") {
		t.Errorf("over the bound: %+v", r)
	}
	l := ProveRow{Bound: time.Second, Pass: true}
	l.record(0, time.Millisecond, "box dw-x", 0, time.Hour)
	if l.Pass || !strings.Contains(l.Failures[0], "left behind: box dw-x") {
		t.Errorf("left behind: %+v", l)
	}
	var e ProveRow
	e.Pass = true
	e.finish()
	if e.Pass {
		t.Errorf("a row without samples passes")
	}
}

func TestHostDelay(t *testing.T) {
	h := startHostDelay()
	time.Sleep(20 * time.Millisecond)
	d := h.Stop()
	if d < 0 || d > 10*time.Second {
		t.Errorf("host delay %v", d)
	}
	if again := h.Stop(); again != d {
		t.Errorf("a second Stop says %v, the first %v", again, d)
	}
}

func TestFrozenSlack(t *testing.T) {
	rep := ProveReport{Rows: []ProveRow{
		{Path: PathSIGKILL, Measure: "agent-dead", N: 3, Max: 40 * time.Millisecond},
		{Path: PathSIGKILL, Measure: "box-removed", N: 3, Max: 900 * time.Millisecond},
		{Path: PathHeartbeat, Measure: "agent-dead", N: 3, Max: 1030 * time.Millisecond},
	}}
	if got := rep.FrozenSlack(time.Second, time.Hour); got != 40*time.Millisecond {
		t.Errorf("slack %v, want the sigkill path's 40ms", got)
	}
	rep.Rows[2].Max = 1100 * time.Millisecond
	if got := rep.FrozenSlack(time.Second, time.Hour); got != 100*time.Millisecond {
		t.Errorf("slack %v, want the heartbeat path's 100ms past its heartbeat", got)
	}
	if got := (&ProveReport{}).FrozenSlack(time.Second, 250*time.Millisecond); got != 250*time.Millisecond {
		t.Errorf("slack without a proof %v", got)
	}
}

// vmBox plays a box whose processes are counted from inside: counts are
// what each count answers in turn (the last repeats); a negative count
// fails, as a count in a box being removed does; listed says whether the
// runtime lists the box at that count.
type vmBox struct {
	counts []int
	listed []bool
	i      int
	asked  int // Exists calls
}

func (v *vmBox) CountProcesses(context.Context, *supervisor.Box, string) (int, error) {
	n := v.counts[min(v.i, len(v.counts)-1)]
	v.i++
	if n < 0 {
		return 0, errors.New(`sbx exec: exit status 1: ERROR: sandbox "x" not found`)
	}
	return n, nil
}

func (v *vmBox) Exists(context.Context, *supervisor.Box) (bool, error) {
	v.asked++
	return v.listed[min(v.i-1, len(v.listed)-1)], nil
}

func TestCountedDead(t *testing.T) {
	box := &supervisor.Box{Name: "x"}
	for _, tc := range []struct {
		name   string
		v      vmBox
		left   bool
		counts int // -1: as many as the wait allows
		asks   int // listings asked for; -1: as many as the wait allows
	}{
		// The agent's processes end while the box is still there: the
		// listing is asked only after a failed count.
		{"counted to none", vmBox{counts: []int{3, 3, 0}, listed: []bool{true}}, false, 3, 0},
		// The supervisor removed the box before a count found none (the
		// controller path): the box's absence is the agent's death.
		{"box removed", vmBox{counts: []int{3, -1}, listed: []bool{true, false}}, false, 2, 1},
		// A count that fails in a box still listed proves nothing.
		{"count failed, box listed", vmBox{counts: []int{3, -1, -1, 0}, listed: []bool{true}}, false, 4, 2},
		{"never ends", vmBox{counts: []int{3}, listed: []bool{true}}, true, -1, 0},
		{"count fails, box listed", vmBox{counts: []int{-1}, listed: []bool{true}}, true, -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.v
			_, left := countedDead(context.Background(), &v, &v, box, "M=1", time.Now().Add(100*time.Millisecond))
			if (left != "") != tc.left {
				t.Errorf("left %q, want left %v", left, tc.left)
			}
			if tc.counts >= 0 && v.i != tc.counts {
				t.Errorf("%d counts, want %d", v.i, tc.counts)
			}
			if tc.asks >= 0 && v.asked != tc.asks {
				t.Errorf("%d listings, want %d", v.asked, tc.asks)
			}
		})
	}
}

// The CPU factor is measured / reference to a tenth and never below 1;
// the allowance is the kill chain's bound factor − 1 times over.
func TestCPUFactor(t *testing.T) {
	for _, c := range []struct {
		measured time.Duration
		want     float64
	}{
		{0, 1}, {800 * time.Microsecond, 1}, {time.Millisecond, 1}, {1040 * time.Microsecond, 1},
		{1500 * time.Microsecond, 1.5}, {6100 * time.Microsecond, 6.1}, {6140 * time.Microsecond, 6.1},
	} {
		if got := cpuFactor(c.measured, time.Millisecond); got != c.want {
			t.Errorf("cpuFactor(%v, 1ms) = %v, want %v", c.measured, got, c.want)
		}
	}
	if got := cpuAllowance(250*time.Millisecond, 6.1); got != 1275*time.Millisecond {
		t.Errorf("allowance at ×6.1 of 250ms: %v, want 1.275s", got)
	}
	if got := cpuAllowance(250*time.Millisecond, 1); got != 0 {
		t.Errorf("allowance at ×1: %v", got)
	}
}

// A row with a CPU allowance: a trial over the bound within it passes,
// listed with the factor; past it and the host delay's it fails; a
// trial within the bound is not listed.
func TestProveRowCPU(t *testing.T) {
	r := ProveRow{Bound: 250 * time.Millisecond, BoundStr: "250ms", Pass: true, cpuFactor: 2, CPUAllowance: cpuAllowance(250*time.Millisecond, 2)}
	r.record(0, 200*time.Millisecond, "", 0, 0)
	r.record(1, 480*time.Millisecond, "", time.Millisecond, 4*time.Millisecond)
	if !r.Pass || len(r.Loaded) != 1 || !strings.Contains(r.Loaded[0], "exceeds the bound 250ms by 230ms, within 250ms for a CPU 2.0× slower than the reference + 4 × the host's wake-up delay of 1ms") {
		t.Errorf("within the CPU allowance: %+v", r)
	}
	r.record(2, 505*time.Millisecond, "", time.Millisecond, 4*time.Millisecond)
	if r.Pass || len(r.Failures) != 1 || !strings.Contains(r.Failures[0], "trial 3: 505ms exceeds the bound 250ms") {
		t.Errorf("past the CPU and host-delay allowance: %+v", r)
	}
}

// On this host the reference hop runs and gives a factor of at least
// 1, recorded with what it timed; --strict applies none.
func TestMeasureCPU(t *testing.T) {
	c := measureCPU(context.Background(), &ProveOptions{Strict: true})
	if c.Error != "" || c.Samples != cpuSamples || c.MeasuredNS <= 0 || c.Factor < 1 || c.Applied || c.Work != cpuWork {
		t.Errorf("measured %+v", c)
	}
	if s := c.Statement(); !strings.Contains(s, "reference 200µs") {
		t.Errorf("statement %q", s)
	}
	t.Logf("%s", c.Statement())
	none := CPUSpeed{Work: cpuWork, ReferenceNS: int64(cpuReference), Factor: 1, Error: "start the CPU reference's child: no sleep"}
	if s := none.Statement(); !strings.Contains(s, "no allowance for a slow CPU") {
		t.Errorf("unmeasured statement %q", s)
	}
	slow := CPUSpeed{Work: "w", ReferenceNS: int64(time.Millisecond), MeasuredNS: int64(6100 * time.Microsecond), Samples: 5, Factor: 6.1, Applied: true}
	if s := slow.Statement(); !strings.Contains(s, "CPU 6.1× slower than the reference: bound allowance ×6.1") {
		t.Errorf("slow statement %q", s)
	}
}
