package bench

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor"
	"deathwatch/supervisor/proc"
)

// idleCost is what one process did while its box sat idle: how often
// its threads were switched in (wake-ups) and the CPU it used.
type idleCost struct {
	wakeups int64
	cpu     time.Duration
}

func readIdleCost(pid int) idleCost {
	n, _ := proc.ContextSwitches(pid)
	st, _ := ktest.ReadStat(pid)
	return idleCost{n, time.Duration(st.CPU) * 10 * time.Millisecond} // USER_HZ = 100
}

func (a idleCost) sub(b idleCost) idleCost { return idleCost{a.wakeups - b.wakeups, a.cpu - b.cpu} }

// TestBenchHeartbeat: the cost of the heartbeat in an idle box (native),
// for no heartbeat, exec's default and a short one, beside the time a
// frozen controller's box survives with each.
func TestBenchHeartbeat(t *testing.T) {
	requireBench(t)
	s := newSection(t, rankHeartbeat, "heartbeat: idle cost per second, and how long a frozen supervisor's box survives", "heartbeat", "supervisor wake-ups/s", "supervisor CPU", "watcher wake-ups/s", "watcher CPU", "frozen → box dead")
	r := ktest.Rigs(t, "native")[0]
	r.Setup(t, "bench-hb")
	const window = 15 * time.Second
	builds := []*rig{{Rig: r}}
	if b := baseRig(t, builds[0]); b != nil {
		builds = append(builds, b)
	}
	for _, hb := range []string{"0", supervisor.DefaultHeartbeat.String(), "1s"} {
		for _, br := range builds {
			heartbeatRow(t, s, br, hb, window)
		}
	}
	removeNativeBoxes(t, builds[0]) // baseRig's cleanup removes the base build's
	s.Note("an idle native box running sleep, measured over %v: context switches of every thread (/proc/PID/task/*/status) and user+system time; CPU is at the kernel's 10 ms tick, so an idle process shows 0", window)
	s.Log()
}

// heartbeatRow measures one build's idle box with heartbeat hb for
// window, then freezes its supervisor and times the box's death.
func heartbeatRow(t *testing.T, s *Section, br *rig, hb string, window time.Duration) {
	t.Helper()
	r := br.Rig
	events := filepath.Join(r.Dir, "events-"+hb+".jsonl")
	args := append(r.ExecArgs(r.Instance, "--watcher", r.Bin.Watcher, "--events", events, "--heartbeat", hb), "--", "sleep", "600")
	cmd := exec.Command(r.Bin.Supervisor, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	box, err := readyBox(events, 30*time.Second)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	watcher := 0
	for _, p := range ktest.Descendants(cmd.Process.Pid) {
		if st, err := ktest.ReadStat(p.PID); err == nil && strings.Contains(st.Comm, "watcher") {
			watcher = p.PID
			break
		}
	}
	if watcher == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no watcher below the supervisor of box %s", box)
	}
	sup0, w0 := readIdleCost(cmd.Process.Pid), readIdleCost(watcher)
	time.Sleep(window)
	sup1, w1 := readIdleCost(cmd.Process.Pid), readIdleCost(watcher)
	sup, w := sup1.sub(sup0), w1.sub(w0)

	// Then freeze the supervisor and time the box's death.
	procs := append([]ktest.Proc{{PID: watcher}}, ktest.Descendants(watcher)...)
	frozen := "lives on (no heartbeat)"
	cmd.Process.Signal(syscall.SIGSTOP)
	t0 := time.Now()
	if hb != "0" {
		took, left := ktest.WaitDead(procs, t0, 30*time.Second)
		frozen = took.Round(time.Millisecond).String()
		if len(left) > 0 {
			frozen = "ALIVE after " + took.Round(time.Second).String()
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	per := func(c idleCost) (string, string) {
		return fmt.Sprintf("%.2f", float64(c.wakeups)/window.Seconds()), fmt.Sprintf("%.2f ms/s", float64(c.cpu.Milliseconds())/window.Seconds())
	}
	sw, sc := per(sup)
	ww, wc := per(w)
	label := hb
	if hb == supervisor.DefaultHeartbeat.String() {
		label += " (default)"
	}
	if br.label != "" {
		label += ", base build"
	}
	s.Row(label, sw, sc, ww, wc, frozen)
	s.Set("heartbeat "+label, map[string]any{"supervisor_wakeups": sup.wakeups, "supervisor_cpu_ns": sup.cpu, "watcher_wakeups": w.wakeups, "watcher_cpu_ns": w.cpu, "window_ns": window, "frozen": frozen})
}
