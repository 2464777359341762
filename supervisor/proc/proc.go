// Package proc is the one place that reads the process table: /proc on
// Linux (the supervisor's owner proof, prove-deathwatch and the demo
// measuring a box's processes, kernel-tests/ktest), sysctl on macOS for
// the little the supervisor needs there (a process's start time).
// Elsewhere a call that cannot be answered returns an error that
// errors.Is(err, errors.ErrUnsupported) sees.
package proc

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Proc names one process and guards against pid reuse: a process is the
// same only while its start time is too.
type Proc struct {
	PID   int
	Start uint64 // Linux: clock ticks since boot; macOS: µs since the epoch
}

func (p Proc) String() string { return strconv.Itoa(p.PID) }

// Alive reports whether p still runs: it exists with the same start
// time and has not exited (a zombie is not alive).
func (p Proc) Alive() bool {
	st, err := StartTime(p.PID)
	return err == nil && st == p.Start && !Zombie(p.PID)
}

// Exists reports whether p is still in the process table (a zombie
// counts).
func (p Proc) Exists() bool {
	st, err := StartTime(p.PID)
	return err == nil && st == p.Start
}

// WaitDead polls every 200µs until none of ps is alive or until; it
// returns when that was and what is still alive.
func WaitDead(ps []Proc, until time.Time) (time.Time, []Proc) {
	return WaitUntil(ps, Proc.Alive, until)
}

// WaitUntil polls every 200µs until present is false for every one of
// ps or until; it returns when that was and those still present.
func WaitUntil(ps []Proc, present func(Proc) bool, until time.Time) (time.Time, []Proc) {
	left := append([]Proc(nil), ps...)
	for {
		keep := left[:0]
		for _, p := range left {
			if present(p) {
				keep = append(keep, p)
			}
		}
		left = keep
		now := time.Now()
		if len(left) == 0 || now.After(until) {
			return now, left
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// Stat is what /proc/PID/stat says about a process.
type Stat struct {
	PID, PPID int
	Session   int  // session id, in the reader's PID namespace
	State     byte // R, S, D, Z, T, ...
	Comm      string
	Start     uint64 // clock ticks since boot (field 22)
	CPU       uint64 // user + system time in clock ticks (fields 14, 15)
}

// ParseStat parses the text of /proc/PID/stat. The command name (field
// 2) may hold spaces and parentheses: the fields after it start after
// the last ')'.
func ParseStat(pid int, b []byte) (Stat, error) {
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
	start, err := strconv.ParseUint(rest[19], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("parse /proc/%d/stat starttime: %w", pid, err)
	}
	utime, _ := strconv.ParseUint(rest[11], 10, 64)
	stime, _ := strconv.ParseUint(rest[12], 10, 64)
	return Stat{PID: pid, PPID: ppid, Session: sid, State: rest[0][0], Comm: string(b[open+1 : end]), Start: start, CPU: utime + stime}, nil
}
