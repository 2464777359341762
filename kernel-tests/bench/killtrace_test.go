package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// The process events connector sees exits only: where the time between
// the supervisor's death and the agent's goes (the engine's attach path,
// the shim, the watcher's wake-up, its kill) is read from a tracefs
// instance of the bench's own, on the same clock (CLOCK_MONOTONIC), so
// that nothing of the machine's tracing is touched.

// killTrace is the bench's tracefs instance.
type killTrace struct{ dir string }

// shimComms are the processes that hold the box's end of the engine's
// attach stream: containerd's shim (docker) and conmon (podman), the
// watcher's parent on an engine.
var shimComms = []string{"containerd-shim", "conmon"}

func openKillTrace(t *testing.T) *killTrace {
	t.Helper()
	root := "/sys/kernel/tracing"
	if _, err := os.Stat(root + "/instances"); err != nil {
		t.Fatalf("tracefs: %v (mount it: mount -t tracefs nodev /sys/kernel/tracing)", err)
	}
	k := &killTrace{dir: filepath.Join(root, "instances", "dwbench-kill-"+strconv.Itoa(os.Getpid()))}
	if err := os.Mkdir(k.dir, 0o755); err != nil {
		t.Fatalf("make a tracefs instance: %v", err)
	}
	t.Cleanup(func() {
		_ = k.write("tracing_on", "0")
		_ = k.write("events/enable", "0")
		if err := os.Remove(k.dir); err != nil {
			t.Errorf("remove the tracefs instance %s: %v", k.dir, err)
		}
	})
	if err := k.write("trace_clock", "mono"); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *killTrace) write(file, v string) error {
	if err := os.WriteFile(filepath.Join(k.dir, file), []byte(v), 0); err != nil {
		return fmt.Errorf("tracefs %s: write %q: %w", file, v, err)
	}
	return nil
}

// arm clears the buffer and traces, until read, the threads of the
// watcher (PID 1, host pid init) and of its parent (the shim or conmon
// on an engine), and those they start: their wake-ups, their reads that
// return 0 (EOF), the SIGKILLs they send. It returns the parent's
// name when the parent is a shim, else "".
func (k *killTrace) arm(init int) (shim string, err error) {
	st, err := ktest.ReadStat(init)
	if err != nil {
		return "", err
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(st.PPID) + "/comm"); err == nil && isShim(strings.TrimSpace(string(b))) {
		shim = strings.TrimSpace(string(b))
	}
	var tids []string
	for _, pid := range []int{init, st.PPID} {
		ts, err := threads(pid)
		if err != nil {
			return "", err
		}
		for _, tid := range ts {
			tids = append(tids, strconv.Itoa(tid))
		}
	}
	for _, s := range []struct{ file, v string }{
		{"tracing_on", "0"},
		{"trace", ""},
		{"options/event-fork", "1"},
		{"set_event_pid", strings.Join(tids, " ")},
		{"events/syscalls/sys_exit_read/filter", "ret == 0"},
		{"events/signal/signal_generate/filter", "sig == 9"},
		{"events/sched/sched_wakeup/enable", "1"},
		{"events/syscalls/sys_exit_read/enable", "1"},
		{"events/signal/signal_generate/enable", "1"},
		{"tracing_on", "1"},
	} {
		if err := k.write(s.file, s.v); err != nil {
			return "", err
		}
	}
	return shim, nil
}

// traceEvent is one line of the trace.
type traceEvent struct {
	comm   string // the task that ran it (the waker, the reader, the sender)
	pid    int
	at     time.Duration // CLOCK_MONOTONIC
	name   string
	fields map[string]string
}

// traceLine is "COMM-PID [CPU] FLAGS SEC.USEC: EVENT: FIELDS", or
// "...: sys_read -> 0xRET" for a system call's exit.
var traceLine = regexp.MustCompile(`^\s*(.+)-(\d+)\s+\[\d+\]\s+(?:\S+\s+)?(\d+)\.(\d+): (\w+)(?::| ->) (.*)$`)

// read stops the trace and returns what it holds.
func (k *killTrace) read() ([]traceEvent, error) {
	if err := k.write("tracing_on", "0"); err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(k.dir, "trace"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []traceEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := traceLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[2])
		sec, _ := strconv.ParseInt(m[3], 10, 64)
		frac, _ := strconv.ParseInt(m[4], 10, 64)
		for i := len(m[4]); i < 9; i++ {
			frac *= 10
		}
		e := traceEvent{comm: m[1], pid: pid, at: time.Duration(sec)*time.Second + time.Duration(frac), name: m[5], fields: map[string]string{}}
		for _, kv := range strings.Fields(m[6]) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				e.fields[k] = v
			}
		}
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, errors.New("the trace is empty")
	}
	return evs, nil
}

// killSplit is where the stream's end went, from the supervisor's
// death (0 where not seen): the first wake-up of the shim from outside
// (by whom: the engine closing its end), the shim's read of EOF, the
// first wake-up of the watcher from outside (by whom: the task that
// closed the box's end of the stream), the watcher's read of EOF, its
// first SIGKILL. Tasks are told apart by name: the watcher's threads
// carry its comm, the shim's threads shim's ("" when the watcher's
// parent is no shim: the native runtime).
type killSplit struct {
	shimWoken, shimEOF, watcherWoken, eof, kill time.Duration
	shimWaker, watcherWaker                     string
}

func splitKill(evs []traceEvent, supExit time.Duration, watcher, shim string) killSplit {
	var s killSplit
	first := func(at *time.Duration, d time.Duration) bool {
		if *at == 0 {
			*at = d
			return true
		}
		return false
	}
	for _, e := range evs {
		if e.at < supExit {
			continue
		}
		d := e.at - supExit
		switch e.name {
		case "sched_wakeup":
			switch wakee := e.fields["comm"]; {
			case wakee == watcher && e.comm != watcher:
				if first(&s.watcherWoken, d) {
					s.watcherWaker = e.comm
				}
			case shim != "" && wakee == shim && e.comm != shim && e.comm != watcher:
				if first(&s.shimWoken, d) {
					s.shimWaker = e.comm
				}
			}
		case "sys_read": // sys_exit_read, filtered to a return of 0
			switch {
			case e.comm == watcher:
				first(&s.eof, d)
			case shim != "" && e.comm == shim:
				first(&s.shimEOF, d)
			}
		case "signal_generate":
			if e.comm == watcher {
				first(&s.kill, d)
			}
		}
	}
	return s
}

func isShim(comm string) bool {
	for _, c := range shimComms {
		if strings.HasPrefix(comm, c) {
			return true
		}
	}
	return false
}

// threads are the tids of pid.
func threads(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	var tids []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, n)
		}
	}
	return tids, nil
}

// dms formats a duration of a trial's timeline: "-" where it was not seen.
func dms(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fms(ms(d))
}

// who is a waker's name, "-" when none was seen.
func who(comm string) string {
	if comm == "" {
		return "-"
	}
	return comm
}
