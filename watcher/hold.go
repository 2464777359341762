package watcher

import (
	"encoding/binary"
	"os"
	"strconv"
	"syscall"
)

// The hold stage: the first image of an agent that must not run before
// the watcher has left its cgroup (spawnHeld). The watcher forks
// its own binary (/proc/self/exe) as the agent — the agent's identity,
// capabilities, keyring, Landlock domain and syscall filter already
// taken — and that process waits on a pipe for the word to go, then execs
// the agent. Nothing of the agent's own runs before the word, and no
// ptrace is needed (Yama's ptrace_scope 3 refuses PTRACE_TRACEME).
//
//	argv: SELF holdArg GO-FD RESULT-FD PATH ARGV...
//
// GO-FD: one byte, holdGo, when the agent may run; EOF when it may not.
// RESULT-FD: close-on-exec at the exec, so EOF says the exec worked; else
// the exec's errno, 4 bytes little-endian.
const (
	holdArg = "--deathwatch-agent-hold"
	holdGo  = 'g'
	// holdNoGo is the hold stage's exit status when the watcher never
	// said go (it is killed first, as a rule).
	holdNoGo = 125
)

// HoldRequested reports whether argv starts the hold stage. It is checked
// before anything else in main.
func HoldRequested(argv []string) bool {
	return len(argv) > 5 && argv[1] == holdArg
}

// HoldMain is the hold stage (see holdArg): it execs the agent once the
// watcher says go and returns only when it cannot, with the exit status.
func HoldMain(argv []string) int {
	goFD, err1 := strconv.Atoi(argv[2])
	resFD, err2 := strconv.Atoi(argv[3])
	if err1 != nil || err2 != nil {
		return holdNoGo
	}
	var b [1]byte
	for {
		n, err := syscall.Read(goFD, b[:])
		if err == syscall.EINTR {
			continue
		}
		if n != 1 || b[0] != holdGo {
			return holdNoGo
		}
		break
	}
	syscall.Close(goFD)
	if _, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(resFD), syscall.F_SETFD, syscall.FD_CLOEXEC); e != 0 {
		return holdNoGo
	}
	err := syscall.Exec(argv[4], argv[5:], os.Environ())
	errno, ok := err.(syscall.Errno)
	if !ok {
		errno = syscall.EINVAL
	}
	var w [4]byte
	binary.LittleEndian.PutUint32(w[:], uint32(errno))
	syscall.Write(resFD, w[:])
	return execStatus(errno)
}

// holdArgv is the argv of the hold stage for the agent a, with its pipe
// ends at fds goFD and resFD.
func holdArgv(a *agent, goFD, resFD int) []string {
	return append([]string{"deathwatch-hold", holdArg, strconv.Itoa(goFD), strconv.Itoa(resFD), a.Path}, a.Argv...)
}
