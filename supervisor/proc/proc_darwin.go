package proc

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// StartTime is a process's start time in microseconds since the epoch
// (sysctl kern.proc.pid's p_starttime).
func StartTime(pid int) (uint64, error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return 0, err
	}
	if kp.Proc.P_pid != int32(pid) {
		return 0, errors.New("no such process")
	}
	t := kp.Proc.P_starttime
	return uint64(t.Sec)*1e6 + uint64(t.Usec), nil
}

// Zombie reports whether pid has exited and waits to be reaped.
func Zombie(pid int) bool {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	return err == nil && kp.Proc.P_stat == 5 // SZOMB
}

// BootID is this boot's session uuid (sysctl kern.bootsessionuuid).
func BootID() string {
	s, _ := unix.Sysctl("kern.bootsessionuuid")
	return s
}

// BootTime is when this boot began (sysctl kern.boottime; zero when it
// does not tell).
func BootTime() time.Time {
	tv, err := unix.SysctlTimeval("kern.boottime")
	if err != nil {
		return time.Time{}
	}
	return time.Unix(tv.Sec, int64(tv.Usec)*1000)
}
