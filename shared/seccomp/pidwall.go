package seccomp

// PidWall is the filter a box adds where the agent shares the watcher's
// uid (Kubernetes Pod Security restricted): the calls that act on
// another process of the same uid without ptrace's checks — prlimit64,
// setpriority, ioprio_set and the sched_set* calls — act on the caller
// alone (pid 0; for setpriority and ioprio_set, also the caller's own
// process group, never "every process of this uid"), and are refused
// (EPERM) on any other pid, PID 1 included. Everything else passes: the
// box's own filter (Program) decides it. Other architectures and x32
// kill, as in Program.
//
// The numbers are written out so that the watcher, which installs the
// wall itself, links no syscall table; a test holds them to numbers.go.

// pidWalled is one call of the wall: its numbers on x86_64 and arm64,
// the argument that names the pid and, for the calls with a "which"
// argument, that argument's index and the value meaning "a uid".
type pidWalled struct {
	name        string
	nr          [2]uint32
	pid         uint8
	which, user int8 // -1: no which argument
}

var pidWalls = [...]pidWalled{
	{"prlimit64", [2]uint32{302, 261}, 0, -1, -1},
	{"setpriority", [2]uint32{141, 140}, 1, 0, 2}, // PRIO_USER
	{"ioprio_set", [2]uint32{251, 30}, 1, 0, 3},   // IOPRIO_WHO_USER
	{"sched_setaffinity", [2]uint32{203, 122}, 0, -1, -1},
	{"sched_setattr", [2]uint32{314, 274}, 0, -1, -1},
	{"sched_setparam", [2]uint32{142, 118}, 0, -1, -1},
	{"sched_setscheduler", [2]uint32{144, 119}, 0, -1, -1},
}

// PidWall is the wall's program.
func PidWall() []Insn {
	p := []Insn{
		ld(offArch),
		jump(jeqK, ArchX86_64, 1, 0),
		jump(jumpAlways, 0, 0, 0), // patched: to arm64
		ld(offNr), jump(jgeK, x32Bit, 0, 1), ret(RetKill),
	}
	p = append(p, pidWallArch(0)...)
	p[2].K = uint32(len(p) - 3)
	p = append(p, jump(jeqK, ArchAArch64, 1, 0), ret(RetKill), ld(offNr))
	return append(p, pidWallArch(1)...)
}

// pidWallArch is the wall for one architecture, entered with the
// syscall number in A.
func pidWallArch(col int) []Insn {
	var p []Insn
	for _, c := range pidWalls {
		body := []Insn{ld(argOff(c.pid)), jump(jeqK, 0, 0, 1), ret(RetAllow), ret(RetErrno | eperm)}
		if c.which >= 0 {
			body = []Insn{
				ld(argOff(c.pid)), jump(jeqK, 0, 0, 3),
				ld(argOff(uint8(c.which))), jump(jeqK, uint32(c.user), 1, 0),
				ret(RetAllow), ret(RetErrno | eperm),
			}
		}
		p = append(p, jump(jeqK, c.nr[col], 0, uint8(len(body))))
		p = append(p, body...)
	}
	return append(p, ret(RetAllow))
}
