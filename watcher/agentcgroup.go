package watcher

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On cgroup v2 the watcher cannot fork the agent from a thread of
// another cgroup (v1's joinThreadCgroup: v2 keeps a process's threads
// in one cgroup), nor start it in another with clone3
// CLONE_INTO_CGROUP (the agent's syscall filter, which the forking
// thread already holds, answers clone3 with ENOSYS so that namespace
// flags stay visible to it). So the watcher waits in the agent's
// memory cgroup, forks the agent there stopped at its exec (ptrace's
// TRACEME: the agent runs no instruction of its own before it is let
// go), moves itself out to its own cgroup, and only then lets the
// agent go: by the time the agent runs, the watcher is no process of
// the cgroup whose limit the agent can fill, and so never its OOM
// victim. The pages the watcher was charged while it was there stay
// charged to it; the watcher's later ones go to its own.

// leaveAgentCgroup moves the watcher into the cgroup whose cgroup.procs
// is open on fd (the host opened it: the kernel checks the write
// against the opener's credentials) and then detaches from the agent,
// pid, stopped at its exec. If the watcher cannot leave, the agent is
// killed before it runs. It must be called on the thread that forked
// the agent (its tracer), with that thread locked.
func leaveAgentCgroup(pid, fd int) error {
	var err error
	for {
		if _, err = syscall.Write(fd, []byte("0")); err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return os.NewSyscallError("leave the agent's cgroup: write", err)
	}
	// The agent stops at its exec a moment after ForkExec has seen the
	// exec succeed: until then PTRACE_DETACH answers ESRCH. Detaching
	// with no signal drops the stop's SIGTRAP.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = unix.PtraceDetach(pid)
		if !errors.Is(err, syscall.ESRCH) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Microsecond)
	}
	if err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return os.NewSyscallError("let the agent go: ptrace(PTRACE_DETACH)", err)
	}
	return nil
}
