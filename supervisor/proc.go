package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ProcStartTime is a process's start time in clock ticks since boot
// (/proc/PID/stat field 22). With the pid it identifies a process
// across pid reuse.
func ProcStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat starttime: %w", pid, err)
	}
	return v, nil
}

// BootID is this boot's id (/proc/sys/kernel/random/boot_id).
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// SelfOwner is the Owner record of this process.
func SelfOwner() (Owner, error) {
	st, err := ProcStartTime(os.Getpid())
	if err != nil {
		return Owner{}, fmt.Errorf("read own start time: %w", err)
	}
	return Owner{PID: os.Getpid(), StartTime: st, BootID: BootID(), PIDNS: PIDNamespace()}, nil
}

// PIDNamespace is the inode of this process's PID namespace (0 when
// /proc does not tell).
func PIDNamespace() uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0
	}
	return st.Ino
}

// Alive reports whether the owner may still run: it names a pid and
// Proof cannot show it gone.
func (o Owner) Alive() bool {
	if o.PID <= 0 {
		return false
	}
	gone, _ := o.Proof()
	return !gone
}
