package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ReadStat parses /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(pid, b)
}

// ContextSwitches is how often the threads of pid were switched in,
// voluntarily or not, summed over /proc/PID/task/*/status: each one is
// a wake-up of the process.
func ContextSwitches(pid int) (int64, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			continue // the thread exited
		}
		st := ParseStatus(string(b))
		for _, f := range []string{"voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"} {
			v, _ := strconv.ParseInt(st[f], 10, 64)
			n += v
		}
	}
	return n, nil
}

// StartTime is a process's start time in clock ticks since boot
// (/proc/PID/stat field 22). With the pid it identifies a process
// across pid reuse.
func StartTime(pid int) (uint64, error) {
	st, err := ReadStat(pid)
	return st.Start, err
}

// Zombie reports whether pid has exited and waits to be reaped (state
// Z or X).
func Zombie(pid int) bool {
	st, err := ReadStat(pid)
	return err == nil && (st.State == 'Z' || st.State == 'X')
}

// BootID is this boot's id (/proc/sys/kernel/random/boot_id).
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// BootTime is when this boot began (/proc/stat's btime, to the second;
// zero when /proc does not tell).
func BootTime() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && s > 0 {
				return time.Unix(s, 0)
			}
		}
	}
	return time.Time{}
}

// SelfPIDNamespace is the inode of this process's PID namespace (0 when
// /proc does not tell).
func SelfPIDNamespace() uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0
	}
	return st.Ino
}

// PIDs lists every process in /proc (the reader's PID namespace).
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

// NSPid returns the pids of a process from the reader's namespace
// inwards, as the kernel prints them: the first is in the reader's
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

// Children lists the processes whose parent is ppid.
func Children(ppid int) []int {
	var out []int
	for _, p := range PIDs() {
		if st, err := ReadStat(p); err == nil && st.PPID == ppid {
			out = append(out, p)
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
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, Proc{PID: c.PID, Start: c.Start})
			queue = append(queue, c.PID)
		}
	}
	return out
}

// Tree is pid, its descendants, and the other processes in its PID
// namespace (when it has one of its own): a box's processes as the
// host sees them from its PID 1.
func Tree(pid int) []Proc {
	start, _ := StartTime(pid)
	out := append([]Proc{{pid, start}}, Descendants(pid)...)
	seen := map[int]bool{}
	for _, p := range out {
		seen[p.PID] = true
	}
	ns, err := PIDNamespace(pid)
	own, _ := os.Readlink("/proc/self/ns/pid")
	if err == nil && ns != own {
		for _, p := range InNamespace(ns) {
			if !seen[p.PID] {
				out = append(out, p)
			}
		}
	}
	return out
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
