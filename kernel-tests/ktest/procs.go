package ktest

import (
	"fmt"
	"strings"
	"time"

	"deathwatch/supervisor/proc"
)

// The process table as the tests read it: supervisor/proc is the one
// reader of /proc, shared with the supervisor.

// Proc names one process and guards against pid reuse: a process is the
// same only while its start time (in clock ticks since boot) is too.
type Proc = proc.Proc

// Stat is what the tests read from /proc/PID/stat.
type Stat = proc.Stat

// ReadStat parses /proc/PID/stat.
func ReadStat(pid int) (Stat, error) { return proc.ReadStat(pid) }

// Stopped reports whether pid is stopped (state T): a supervisor that
// reached its crash point stops itself.
func Stopped(pid int) bool {
	st, err := ReadStat(pid)
	return err == nil && st.State == 'T'
}

// PIDs lists every process in /proc (the test's PID namespace).
func PIDs() []int { return proc.PIDs() }

// Status reads /proc/PID/status into a map of field → value (trimmed).
func Status(pid int) (map[string]string, error) { return proc.Status(pid) }

// ParseStatus parses the text of a /proc/PID/status file.
func ParseStatus(text string) map[string]string { return proc.ParseStatus(text) }

// StatusField reads one field of /proc/PID/status.
func StatusField(pid int, field string) (string, error) { return proc.StatusField(pid, field) }

// Cmdline returns the arguments of a process (nil if it is gone or a
// kernel thread).
func Cmdline(pid int) []string { return proc.Cmdline(pid) }

// PIDNamespace returns the PID namespace of a process, as the
// /proc/PID/ns/pid link reads ("pid:[4026531836]").
func PIDNamespace(pid int) (string, error) { return proc.PIDNamespace(pid) }

// NSPid returns the pids of a process, the first in the test's
// namespace, the last in the process's own.
func NSPid(pid int) ([]int, error) { return proc.NSPid(pid) }

// InNamespace lists the live processes whose PID namespace is ns.
func InNamespace(ns string) []Proc { return proc.InNamespace(ns) }

// Descendants lists the processes below pid (children, grandchildren,
// ...), as parentage stands now.
func Descendants(pid int) []Proc { return proc.Descendants(pid) }

// FDs lists the open file descriptors of a process with their targets.
func FDs(pid int) (map[int]string, error) { return proc.FDs(pid) }

// WithMarker lists the processes that have marker as one of their
// arguments (a test passes a unique marker as $0 of a shell script; the
// forked subshells of that script keep it).
func WithMarker(marker string) []Proc {
	var out []Proc
	for _, pid := range PIDs() {
		for _, a := range Cmdline(pid) {
			if a == marker {
				if st, err := ReadStat(pid); err == nil {
					out = append(out, Proc{PID: pid, Start: st.Start})
				}
				break
			}
		}
	}
	return out
}

// WithMarkerRoots is WithMarker without the processes whose parent
// carries the marker as well: a shell's fork that has not yet exec'd
// (or a subshell) has its parent's argv, but comes and goes.
func WithMarkerRoots(marker string) []Proc {
	all := WithMarker(marker)
	has := map[int]bool{}
	for _, p := range all {
		has[p.PID] = true
	}
	var out []Proc
	for _, p := range all {
		if st, err := ReadStat(p.PID); err == nil && !has[st.PPID] {
			out = append(out, p)
		}
	}
	return out
}

// Alive reports whether p still runs: it exists with the same start time
// and is not a zombie.
func Alive(p Proc) bool { return p.Alive() }

// Exists reports whether p is still in the process table (a zombie
// counts).
func Exists(p Proc) bool { return p.Exists() }

// WaitDead polls /proc (every 200µs) until none of ps is alive (gone or a
// zombie) and returns how long that took after since. On timeout it
// returns the processes still alive.
func WaitDead(ps []Proc, since time.Time, timeout time.Duration) (time.Duration, []Proc) {
	at, left := proc.WaitUntil(ps, Proc.Alive, time.Now().Add(timeout))
	return at.Sub(since), left
}

// WaitGone is WaitDead for leaving the process table (reaped as well).
func WaitGone(ps []Proc, since time.Time, timeout time.Duration) (time.Duration, []Proc) {
	at, left := proc.WaitUntil(ps, Proc.Exists, time.Now().Add(timeout))
	return at.Sub(since), left
}

// WaitFor polls every 5ms until cond returns true or timeout passes.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Describe is a one-line description of processes for failure messages.
func Describe(ps []Proc) string {
	var parts []string
	for _, p := range ps {
		st, err := ReadStat(p.PID)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%d(gone)", p.PID))
			continue
		}
		uid, _ := StatusField(p.PID, "Uid")
		parts = append(parts, fmt.Sprintf("%d(%c %s uid=%s ppid=%d %q)", p.PID, st.State, st.Comm, firstField(uid), st.PPID, strings.Join(Cmdline(p.PID), " ")))
	}
	return strings.Join(parts, ", ")
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}
