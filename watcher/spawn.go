package watcher

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"syscall"

	"deathwatch/shared/seccomp"
	"golang.org/x/sys/unix"
)

// defaultPath is used when the agent's environment has no PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// agent is everything needed to start the agent, worked out as plain
// data before anything privileged happens.
type agent struct {
	Path  string
	Argv  []string
	Env   []string
	Dir   string
	Files []uintptr // become the agent's fds 0, 1, 2 …
	// Cred, when set, is the identity to take; DropCaps also clears the
	// bounding and inheritable sets and sets no_new_privs.
	Cred     *syscall.Credential
	DropCaps bool
	Setsid   bool
	// The box's walls (control mode): a session keyring of its own, a
	// Landlock domain that scopes abstract sockets and signals to the
	// agent's processes and limits its writes to the box's writable
	// paths (landlock.go; nil: none), a syscall filter installed right
	// before the fork, and an oom_score_adj that makes the agent the OOM
	// killer's first choice.
	NewKeyring bool
	Landlock   *landlockPlan
	Filter     []seccomp.Insn
	OOMScore   int // 0: the watcher's own
	// SameUID (restricted mode) starts the agent at the watcher's own
	// uid, without Cred: the thread's ambient and inheritable sets are
	// emptied instead of its bounding set, which takes a capability the
	// watcher does not have. PidWall is a filter installed before Filter
	// (seccomp.PidWall).
	SameUID bool
	PidWall []seccomp.Insn
	// CgroupTasks is a v1 "tasks" file the spawning thread joins before
	// the fork, so that the agent is born in that cgroup (0: none).
	CgroupTasks int
	// LeaveCgroup is a v2 "cgroup.procs" file the watcher moves itself
	// to once it has forked the agent, which stays in the cgroup they
	// shared (0: none; see spawnHeld).
	LeaveCgroup int
	// Setpgid makes the agent lead a process group of its own;
	// Foreground also makes that group the foreground group of the
	// terminal on the agent's fd 0.
	Setpgid    bool
	Foreground bool
	// Setctty makes the agent's fd 0, a terminal, the controlling
	// terminal of its session (with Setsid).
	Setctty bool
}

// spawnAttr builds the ProcAttr for the agent. Pure: tested without root.
func spawnAttr(a *agent) *syscall.ProcAttr {
	attr := &syscall.ProcAttr{
		Dir:   a.Dir,
		Env:   a.Env,
		Files: a.Files,
		// Ctty 0: with Setctty or Foreground, the child's fd 0 is the terminal.
		Sys: &syscall.SysProcAttr{Setsid: a.Setsid, Setctty: a.Setctty, Setpgid: a.Setpgid, Foreground: a.Foreground},
	}
	if a.Cred != nil {
		c := *a.Cred
		c.Groups = []uint32{} // clear supplementary groups
		c.NoSetGroups = false
		attr.Sys.Credential = &c
	}
	return attr
}

// spawn starts the agent. When it must drop capabilities it does so on
// a thread of its own that is locked and never unlocked, so the Go
// runtime throws that thread away afterwards: no_new_privs and the
// bounding set are per-thread attributes the child inherits at clone,
// and the rest of the watcher keeps its own.
//
// The session keyring, the Landlock domain and the syscall filter are
// per-thread too, and taken on the same thread, in that order (the
// filter denies keyctl).
func spawn(a *agent) (pid int, err error) {
	if !a.DropCaps && !a.SameUID && !a.NewKeyring && a.Landlock == nil && a.Filter == nil && a.PidWall == nil && a.CgroupTasks == 0 && a.LeaveCgroup == 0 {
		return syscall.ForkExec(a.Path, a.Argv, spawnAttr(a))
	}
	if a.OOMScore != 0 {
		withOOMScore(a.OOMScore, func() { pid, err = spawnTainted(a) })
		return pid, err
	}
	return spawnTainted(a)
}

// spawnTainted forks the agent from a locked thread that it taints
// first and that the runtime throws away afterwards. The main thread is
// never thrown away (the runtime parks it for good instead, taint and
// all, and /proc shows the process as its main thread): when the work
// lands there, it holds that thread until another goroutine is locked
// to a thread of its own, which does the work.
func spawnTainted(a *agent) (int, error) {
	var pid int
	var err error
	finished := make(chan struct{})
	ownThread := make(chan struct{})
	var work func()
	work = func() {
		runtime.LockOSThread()
		if syscall.Gettid() == syscall.Getpid() {
			go work() // on another thread: this one is locked to us
			// Held only until the other goroutine holds a thread of its
			// own: a main thread still locked when the tainted thread
			// exits makes the runtime start one more thread to hand it
			// back its P, an idle one for good.
			<-ownThread
			runtime.UnlockOSThread()
			return
		}
		close(ownThread)
		// No UnlockOSThread: the thread exits with this goroutine.
		if a.CgroupTasks > 0 {
			err = joinThreadCgroup(a.CgroupTasks)
		}
		if err == nil {
			err = taintThread(a)
		}
		if err == nil && a.LeaveCgroup > 0 {
			pid, err = spawnHeld(a)
		} else if err == nil {
			pid, err = syscall.ForkExec(a.Path, a.Argv, spawnAttr(a))
		}
		close(finished)
	}
	go work()
	<-finished
	return pid, err
}

// joinThreadCgroup moves the calling thread, never the main one, into
// the v1 cgroup whose "tasks" file is open on fd; a child forked from
// it is born there. Only this thread moves: the watcher's memory is
// charged to its thread group's leader, which stays in the box's
// cgroup. The kernel checks the write against the credentials of the
// host process that opened the file. It must be called with the OS
// thread locked, on a thread that is thrown away afterwards.
func joinThreadCgroup(fd int) error {
	if syscall.Gettid() == syscall.Getpid() {
		return errors.New("join the agent's cgroup: refused on the main thread (it would move the watcher's own memory)")
	}
	for {
		_, err := syscall.Write(fd, []byte("0"))
		switch err {
		case syscall.EINTR:
			continue
		case nil:
			return nil
		}
		return os.NewSyscallError("join the agent's memory cgroup: write", err)
	}
}

// taintThread applies to the calling thread what the agent inherits
// from it: dropCaps (or, at the same uid, clearInheritedCaps), a new
// session keyring, the Landlock domain, the pid wall and the syscall
// filter. It must be called with the OS thread locked.
func taintThread(a *agent) error {
	if a.DropCaps || a.SameUID || a.Landlock != nil || a.Filter != nil || a.PidWall != nil {
		// no_new_privs: also what lets an unprivileged thread install a
		// filter or enter a Landlock domain.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return os.NewSyscallError("prctl(PR_SET_NO_NEW_PRIVS)", err)
		}
	}
	if a.DropCaps {
		if err := dropCaps(); err != nil {
			return err
		}
	}
	if a.SameUID {
		if err := clearInheritedCaps(); err != nil {
			return err
		}
	}
	if a.NewKeyring {
		if err := joinNewSessionKeyring(); err != nil {
			return err
		}
	}
	if a.Landlock != nil {
		if err := restrictThread(a.Landlock); err != nil {
			return err
		}
	}
	if a.PidWall != nil {
		if err := installFilter(a.PidWall); err != nil {
			return err
		}
	}
	if a.Filter != nil {
		return installFilter(a.Filter)
	}
	return nil
}

// dropCaps empties the bounding set and clears the inheritable set of
// the calling thread. It must be called with the OS thread locked.
func dropCaps() error {
	last := lastCap() // read once: the loop's condition read it for every capability (41 opens of procfs before each agent fork)
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return os.NewSyscallError("prctl(PR_CAPBSET_DROP) (the watcher needs CAP_SETPCAP)", err)
		}
	}
	return clearInheritable()
}

// clearInheritable empties the calling thread's inheritable set. It
// must be called with the OS thread locked.
func clearInheritable() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capget", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capset", err)
	}
	return nil
}

// lastCap is the highest capability number this kernel knows.
func lastCap() int {
	b, err := readFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 63
	}
	n := 0
	for _, ch := range strings.TrimSpace(string(b)) {
		if ch < '0' || ch > '9' {
			return 63
		}
		n = n*10 + int(ch-'0')
	}
	return n
}

// stdinIsCtty reports whether fd 0 is the watcher's controlling
// terminal, where tini calls tcsetpgrp (any other fd 0 makes it fail).
func stdinIsCtty() bool {
	_, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil
}

// errNotFound marks a command that is nowhere on PATH.
var errNotFound = errors.New("not found")

// lookPath resolves name as execvp does: a name with a slash is used as
// it is; otherwise the first regular executable file on PATH. A file
// that exists but is not executable is EACCES.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	denied := false
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil || st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			continue
		}
		if st.Mode&0o111 == 0 {
			denied = true
			continue
		}
		return p, nil
	}
	if denied {
		return "", syscall.EACCES
	}
	return "", errNotFound
}
