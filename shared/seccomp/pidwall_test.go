package seccomp

import "testing"

// The wall refuses every pid but the caller's for the calls it names,
// on both architectures, and passes every other call.
func TestPidWall(t *testing.T) {
	const eperm = RetErrno | 1
	x, a := uint32(ArchX86_64), uint32(ArchAArch64)
	p := PidWall()
	for _, c := range []struct {
		name string
		arch uint32
		nr   int32
		args []uint64
		want uint32
	}{
		{"prlimit64(0)", x, 302, []uint64{0}, RetAllow},
		{"prlimit64(1)", x, 302, []uint64{1}, eperm},
		{"prlimit64(1) arm64", a, 261, []uint64{1}, eperm},
		{"prlimit64(1<<32): pid_t is the low word", x, 302, []uint64{1 << 32}, RetAllow},
		{"setpriority(PRIO_PROCESS, 0)", x, 141, []uint64{0, 0, 19}, RetAllow},
		{"setpriority(PRIO_PROCESS, 1)", x, 141, []uint64{0, 1, 19}, eperm},
		{"setpriority(PRIO_PGRP, 0): the caller's group", x, 141, []uint64{1, 0, 19}, RetAllow},
		{"setpriority(PRIO_PGRP, 1)", a, 140, []uint64{1, 1, 19}, eperm},
		{"setpriority(PRIO_USER, 0): every process of the uid", x, 141, []uint64{2, 0, 19}, eperm},
		{"ioprio_set(IOPRIO_WHO_PROCESS, 0)", x, 251, []uint64{1, 0, 0}, RetAllow},
		{"ioprio_set(IOPRIO_WHO_PROCESS, 1) arm64", a, 30, []uint64{1, 1, 0}, eperm},
		{"ioprio_set(IOPRIO_WHO_USER, 0)", x, 251, []uint64{3, 0, 0}, eperm},
		{"sched_setaffinity(0)", x, 203, []uint64{0}, RetAllow},
		{"sched_setaffinity(1)", x, 203, []uint64{1}, eperm},
		{"sched_setaffinity(7) arm64", a, 122, []uint64{7}, eperm},
		{"sched_setattr(1)", x, 314, []uint64{1}, eperm},
		{"sched_setparam(1) arm64", a, 118, []uint64{1}, eperm},
		{"sched_setscheduler(1)", x, 144, []uint64{1}, eperm},
		{"sched_setscheduler(0) arm64", a, 119, []uint64{0}, RetAllow},
		{"kill(1) passes (Landlock's signal scope stops it)", x, 62, []uint64{1, 9}, RetAllow},
		{"read", a, 63, nil, RetAllow},
		{"x32 prlimit64", x, 0x40000000 | 302, []uint64{0}, RetKill},
		{"i386", 0x40000003, 1, nil, RetKill},
	} {
		if got := run(t, p, c.arch, c.nr, c.args...); got != c.want {
			t.Errorf("%s: %#x, want %#x", c.name, got, c.want)
		}
	}
}

// The wall's numbers are the syscall table's.
func TestPidWallNumbers(t *testing.T) {
	table := map[string][2]int16{}
	for _, c := range numbers {
		table[c.name] = c.nr
	}
	for _, c := range pidWalls {
		nr, ok := table[c.name]
		if !ok || uint32(nr[0]) != c.nr[0] || uint32(nr[1]) != c.nr[1] {
			t.Errorf("%s: the wall says %v, numbers.go %v", c.name, c.nr, nr)
		}
	}
}
