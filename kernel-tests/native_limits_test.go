package kerneltests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
)

// pidsDir is the box's pids cgroup folder (v1) or its cgroup (v2).
func pidsDir(t *testing.T, b *supervisor.Box) string {
	for _, d := range cgroupDirs(t, b) {
		if _, err := os.Stat(filepath.Join(d, "pids.max")); err == nil {
			return d
		}
	}
	t.Fatalf("no pids controller in %v", cgroupDirs(t, b))
	return ""
}

// A shell that forks 200 sleeps gets no more than the pids limit: dash
// gives up at the first failed fork.
func TestNativePidsLimit(t *testing.T) {
	rt, bins := nativeRT(t, supervisor.NativeOptions{})
	b := newBox(t, bins)
	b.PidsLimit = 48
	script := `i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); echo $i; done`
	r := runBox(t, rt, b, agentSpec("/bin/sh", "-c", script), func(shared.Ready) {
		if got := readFileTrim(t, filepath.Join(pidsDir(t, b), "pids.max")); got != "48" {
			t.Errorf("pids.max = %s, want 48", got)
		}
	})
	out := strings.Fields(r.Stdout)
	n := 0
	if len(out) > 0 {
		n, _ = strconv.Atoi(out[len(out)-1])
	}
	t.Logf("exit %+v after %v; %d sleeps started; stderr %q", r.Exit, r.Total, n, r.Stderr)
	if n == 0 || n >= 48 || r.Exit.Code == 0 || !strings.Contains(strings.ToLower(r.Stderr), "fork") {
		t.Fatalf("%d sleeps started, exit %d, stderr %q; want fewer than the limit 48 and a failed fork", n, r.Exit.Code, r.Stderr)
	}
}

// A real fork bomb is contained by the pids limit, ended by the deadline
// and leaves nothing behind.
func TestNativeForkBomb(t *testing.T) {
	rt, bins := nativeRT(t, supervisor.NativeOptions{})
	b := newBox(t, bins)
	b.PidsLimit = 64
	spec := agentSpec("/bin/sh", "-c", `b() { b | b & }; b 2>/dev/null; sleep 5`)
	spec.Deadline = 1500 * time.Millisecond
	spec.Grace = 200 * time.Millisecond
	var peak int
	r := runBox(t, rt, b, spec, func(shared.Ready) {
		dir := pidsDir(t, b)
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if n, err := strconv.Atoi(readFileTrim(t, filepath.Join(dir, "pids.current"))); err == nil && n > peak {
				peak = n
			}
		}
		ev := readFileTrim(t, filepath.Join(dir, "pids.events"))
		t.Logf("pids.current peak %d (limit 64); pids.events: %s", peak, ev)
		if !strings.Contains(ev, "max ") || strings.HasSuffix(ev, "max 0") {
			t.Errorf("pids.events %q: the limit was never hit", ev)
		}
	})
	t.Logf("exit %+v after %v", r.Exit, r.Total)
	if peak > 64 {
		t.Errorf("peak %d processes above the limit 64", peak)
	}
	if r.Exit.Reason != shared.ReasonDeadline || r.Exit.Code != shared.ExitDeadline {
		t.Errorf("exit %+v; want the deadline", r.Exit)
	}
	for _, d := range cgroupDirs(t, b) {
		if ps, err := cgroupProcs(d); err != nil || len(ps) != 0 {
			t.Errorf("cgroup %s holds %v after the box ended (%v)", d, ps, err)
		}
	}
	if err := rt.Remove(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	for _, d := range cgroupDirs(t, b) {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left after Remove", d)
		}
	}
}

// An allocation past the memory limit is killed; one below it is not.
func TestNativeMemoryLimit(t *testing.T) {
	rt, bins := nativeRT(t, supervisor.NativeOptions{})
	for _, c := range []struct {
		size string
		want int
	}{
		{"16M", 0},
		{"256M", shared.SignalStatus(9)},
	} {
		t.Run(c.size, func(t *testing.T) {
			b := newBox(t, bins)
			b.Memory = 96 << 20
			var memDir string
			r := runBox(t, rt, b, agentSpec("/bin/sh", "-c", "exec dd if=/dev/zero of=/dev/null bs="+c.size+" count=2"), func(shared.Ready) {
				memDir = cgroupDirs(t, b)[0]
			})
			t.Logf("dd bs=%s with a %d MiB limit: exit %+v; stderr %q", c.size, b.Memory>>20, r.Exit, r.Stderr)
			if r.Exit.Code != c.want {
				t.Errorf("exit code %d, want %d", r.Exit.Code, c.want)
			}
			if b.State[supervisor.StateCgroupVersion] == "1" {
				limit := readFileTrim(t, filepath.Join(memDir, "memory.limit_in_bytes"))
				sw := readFileTrim(t, filepath.Join(memDir, "memory.memsw.limit_in_bytes"))
				if limit != strconv.Itoa(96<<20) || sw != limit {
					t.Errorf("memory.limit_in_bytes %s, memsw %s; want both %d", limit, sw, 96<<20)
				}
				oom := readFileTrim(t, filepath.Join(memDir, "memory.oom_control"))
				t.Logf("memory.oom_control: %s", strings.ReplaceAll(oom, "\n", ", "))
			}
		})
	}
}
