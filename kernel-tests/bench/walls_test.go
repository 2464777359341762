package bench

import (
	"fmt"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/shared/landlock"
	"deathwatch/shared/seccomp"
	"deathwatch/supervisor"
)

// wallsVariant is one spec the walls' launch cost is measured with.
type wallsVariant struct {
	name         string
	filter       bool // the supervisor's default syscall filter
	writeLimits  bool // the write limits of a box with no mounts
	ready, total []time.Duration
}

// TestBenchWalls: what the syscall filter and Landlock's write limits
// add to a launch. The watcher in control mode, PID 1 of a fresh PID
// namespace, runs /bin/true from a spec with and without each; the runs
// are interleaved. Ready is hello and spec sent → the ready frame (the
// filter is compiled by the supervisor, so the watcher only decodes and
// installs it; the write rules are opened and applied before the fork);
// total is the watcher's start → its exit, the agent's run under the
// walls included. The same watcher code applies them on every runtime.
func TestBenchWalls(t *testing.T) {
	requireBench(t)
	if abi, err := landlock.ABI(); err != nil || abi < landlock.WriteABI {
		t.Fatalf("Landlock ABI %d (%v): the write limits need ABI %d", abi, err, landlock.WriteABI)
	}
	w := ktest.Build(t).Watcher
	n := runsFromEnv("DEATHWATCH_BENCH_WALLS_RUNS", 150)
	vs := []*wallsVariant{
		{name: "neither"},
		{name: "filter", filter: true},
		{name: "write limits", writeLimits: true},
		{name: "filter + write limits (every box's)", filter: true, writeLimits: true},
	}
	s := newSection(t, rankWalls, fmt.Sprintf("the walls' launch cost: watcher --control=fd:3 as PID 1 runs /bin/true, %d runs each, interleaved", n),
		"spec", "ready p50", "ready p95", "ready over neither", "total p50", "total p95", "total / neither")
	filter := seccomp.Default(false)
	writable := supervisor.WritablePaths(&supervisor.Box{})
	for r := -5; r < n; r++ {
		for i := range vs {
			v := vs[(i+max(r, 0))%len(vs)]
			spec := shared.Spec{Argv: []string{trueBin}, Env: []string{"PATH=/usr/bin:/bin"},
				UID: shared.DefaultAgentUID, GID: shared.DefaultAgentGID, Grace: time.Second}
			if v.filter {
				spec.Seccomp = filter
			}
			if v.writeLimits {
				spec.Writable = writable
			}
			c := ktest.StartController(t, w, ktest.Options{Control: ktest.ControlFD, PID1: true})
			t0 := time.Now()
			c.Launch(spec)
			ready := time.Since(t0)
			res := c.Wait(10 * time.Second)
			if res.Code != 0 {
				t.Fatalf("%s: the watcher exited %d\n%s", v.name, res.Code, c.Diagnostics())
			}
			if r >= 0 {
				v.ready = append(v.ready, ready)
				v.total = append(v.total, res.Elapsed)
			}
		}
	}
	base, baseTotal := summarize(vs[0].ready), summarize(vs[0].total)
	for i, v := range vs {
		ready, total := summarize(v.ready), summarize(v.total)
		over, ratio := "—", "—"
		if i > 0 {
			over, ratio = fmt.Sprintf("%+.3f ms", ready.P50-base.P50), fmt.Sprintf("%.3f", total.P50/baseTotal.P50)
		}
		s.Row(v.name, fms(ready.P50), fms(ready.P95), over, fms(total.P50), fms(total.P95), ratio)
		s.Set(v.name, map[string]any{"filter": v.filter, "write_limits": v.writeLimits, "ready": ready, "total": total,
			"ready_over_neither_ms": round3(ready.P50 - base.P50), "total_over_neither": round3(total.P50 / baseTotal.P50)})
	}
	s.Note("every variant has the Landlock scopes (ABI %d), which a spec cannot turn off; the write limits are a box's with no --mount (%d paths)", landlock.ScopeABI, len(writable))
	s.Log()
}
