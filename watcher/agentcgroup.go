package watcher

import (
	"encoding/binary"
	"os"
	"syscall"
)

// On cgroup v2 the watcher cannot fork the agent from a thread of
// another cgroup (v1's joinThreadCgroup: v2 keeps a process's threads
// in one cgroup), nor start it in another with clone3
// CLONE_INTO_CGROUP (the agent's syscall filter, which the forking
// thread already holds, answers clone3 with ENOSYS so that namespace
// flags stay visible to it). So the watcher waits in the agent's
// memory cgroup, forks the agent there as the hold stage (hold.go:
// its own binary, which runs no instruction of the agent's until it is
// let go), moves itself out to its own cgroup, and only then lets the
// agent go: by the time the agent runs, the watcher is no process of
// the cgroup whose limit the agent can fill, and so never its OOM
// victim. The pages the watcher was charged while it was there stay
// charged to it; the watcher's later ones go to its own.

// spawnHeld forks the agent a in the hold stage, moves the watcher into
// the cgroup whose cgroup.procs is open on a.LeaveCgroup (the host
// opened it: the kernel checks the write against the opener's
// credentials), then lets the agent go and returns once its exec is
// done, with the exec's error as ForkExec would. If the watcher cannot
// leave, the agent is killed before it runs. It must be called on the
// tainted thread (spawnTainted).
func spawnHeld(a *agent) (int, error) {
	var goP, resP [2]int
	if err := syscall.Pipe2(goP[:], syscall.O_CLOEXEC); err != nil {
		return 0, os.NewSyscallError("hold the agent: pipe2", err)
	}
	defer syscall.Close(goP[1])
	if err := syscall.Pipe2(resP[:], syscall.O_CLOEXEC); err != nil {
		syscall.Close(goP[0])
		return 0, os.NewSyscallError("hold the agent: pipe2", err)
	}
	defer syscall.Close(resP[0])
	attr := spawnAttr(a)
	n := len(attr.Files)
	attr.Files = append(append([]uintptr(nil), attr.Files...), uintptr(goP[0]), uintptr(resP[1]))
	pid, err := syscall.ForkExec("/proc/self/exe", holdArgv(a, n, n+1), attr)
	syscall.Close(goP[0])
	syscall.Close(resP[1])
	if err != nil {
		return 0, err
	}
	for {
		if _, err = syscall.Write(a.LeaveCgroup, []byte("0")); err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return pid, os.NewSyscallError("leave the agent's cgroup: write", err)
	}
	for {
		if _, err = syscall.Write(goP[1], []byte{holdGo}); err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return pid, os.NewSyscallError("let the agent go: write", err)
	}
	// EOF: the exec worked (the hold stage's end is close-on-exec).
	var b [4]byte
	got := 0
	for got < len(b) {
		n, err := syscall.Read(resP[0], b[got:])
		if err == syscall.EINTR {
			continue
		}
		if n <= 0 {
			break
		}
		got += n
	}
	if got == len(b) {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
		return 0, syscall.Errno(binary.LittleEndian.Uint32(b[:]))
	}
	return pid, nil
}
