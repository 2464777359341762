package ktest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Proc names one process and guards against pid reuse: a process is the
// same only while its start time (in clock ticks since boot) is too.
type Proc struct {
	PID   int
	Start uint64
}

func (p Proc) String() string { return strconv.Itoa(p.PID) }

// Stat is what the tests read from /proc/PID/stat.
type Stat struct {
	PID, PPID int
	Session   int  // session id, in the test's PID namespace
	State     byte // R, S, D, Z, T, ...
	Comm      string
	Start     uint64
}

// ReadStat parses /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	// comm is in parentheses and may hold spaces or parentheses itself.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 >= len(b) {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: %q", pid, b)
	}
	rest := strings.Fields(string(b[end+2:]))
	// rest[0] is field 3 (state); start time is field 22.
	if len(rest) < 20 {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(rest)+2)
	}
	ppid, _ := strconv.Atoi(rest[1])
	sid, _ := strconv.Atoi(rest[3])
	start, _ := strconv.ParseUint(rest[19], 10, 64)
	return Stat{PID: pid, PPID: ppid, Session: sid, State: rest[0][0], Comm: string(b[open+1 : end]), Start: start}, nil
}

// PIDs lists every process in /proc (the test's PID namespace).
func PIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

// Status reads /proc/PID/status into a map of field → value (trimmed).
func Status(pid int) (map[string]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	return ParseStatus(string(b)), nil
}

// ParseStatus parses the text of a /proc/PID/status file.
func ParseStatus(text string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// StatusField reads one field of /proc/PID/status.
func StatusField(pid int, field string) (string, error) {
	m, err := Status(pid)
	if err != nil {
		return "", err
	}
	v, ok := m[field]
	if !ok {
		return "", fmt.Errorf("/proc/%d/status has no %s field", pid, field)
	}
	return v, nil
}

// Cmdline returns the arguments of a process (nil if it is gone or a
// kernel thread).
func Cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// PIDNamespace returns the PID namespace of a process, as the
// /proc/PID/ns/pid link reads ("pid:[4026531836]").
func PIDNamespace(pid int) (string, error) {
	return os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
}

// NSPid returns the pids of a process from its own namespace outwards
// reversed as the kernel prints them: the first is in the test's
// namespace, the last in the process's own.
func NSPid(pid int) ([]int, error) {
	v, err := StatusField(pid, "NSpid")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(v) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse NSpid %q of %d: %w", v, pid, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// InNamespace lists the live processes whose PID namespace is ns.
func InNamespace(ns string) []Proc {
	var out []Proc
	for _, pid := range PIDs() {
		if l, err := PIDNamespace(pid); err == nil && l == ns {
			if st, err := ReadStat(pid); err == nil {
				out = append(out, Proc{PID: pid, Start: st.Start})
			}
		}
	}
	return out
}

// Descendants lists the processes below pid (children, grandchildren,
// ...), as parentage stands now.
func Descendants(pid int) []Proc {
	children := map[int][]Stat{}
	for _, p := range PIDs() {
		if st, err := ReadStat(p); err == nil {
			children[st.PPID] = append(children[st.PPID], st)
		}
	}
	var out []Proc
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, Proc{PID: c.PID, Start: c.Start})
			queue = append(queue, c.PID)
		}
	}
	return out
}

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
func Alive(p Proc) bool {
	st, err := ReadStat(p.PID)
	return err == nil && st.Start == p.Start && st.State != 'Z'
}

// Exists reports whether p is still in the process table (a zombie
// counts).
func Exists(p Proc) bool {
	st, err := ReadStat(p.PID)
	return err == nil && st.Start == p.Start
}

// WaitDead polls /proc (every 200µs) until none of ps is alive (gone or a
// zombie) and returns how long that took after since. On timeout it
// returns the processes still alive.
func WaitDead(ps []Proc, since time.Time, timeout time.Duration) (time.Duration, []Proc) {
	return waitUntil(ps, Alive, since, timeout)
}

// WaitGone is WaitDead for leaving the process table (reaped as well).
func WaitGone(ps []Proc, since time.Time, timeout time.Duration) (time.Duration, []Proc) {
	return waitUntil(ps, Exists, since, timeout)
}

func waitUntil(ps []Proc, present func(Proc) bool, since time.Time, timeout time.Duration) (time.Duration, []Proc) {
	left := append([]Proc(nil), ps...)
	deadline := time.Now().Add(timeout)
	for {
		keep := left[:0]
		for _, p := range left {
			if present(p) {
				keep = append(keep, p)
			}
		}
		left = keep
		now := time.Now()
		if len(left) == 0 {
			return now.Sub(since), nil
		}
		if now.After(deadline) {
			return now.Sub(since), left
		}
		time.Sleep(200 * time.Microsecond)
	}
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

// FDs lists the open file descriptors of a process with their targets.
func FDs(pid int) (map[int]string, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, _ := os.Readlink(filepath.Join(dir, e.Name()))
		out[n] = target
	}
	return out, nil
}
