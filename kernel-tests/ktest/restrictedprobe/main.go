// Command restrictedprobe is the evidence behind the Pod Security
// level a box needs: run as PID 1 of a pod that passes `restricted`, it
// tries what would keep an agent from the watcher there (a user
// namespace of its own; PID 1, not dumpable, with the agent at its own
// uid), then runs itself as that agent, once as the pod leaves it and
// once behind the walls a restricted mode would add, and tries every
// attack on PID 1. It prints one line per attempt;
// TestKubernetesRestrictedProbe runs it and holds the verdicts
// docs/runtimes/kubernetes.md states.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"unsafe"

	"golang.org/x/sys/unix"
)

// prefix starts every verdict line: ATTACK for the agent as the pod
// leaves it, WALLED for the agent behind the walls a restricted mode
// would add (walls).
var prefix = "ATTACK"

func try(name string, err error) {
	if err == nil {
		fmt.Printf("%s %-40s SUCCEEDED\n", prefix, name)
	} else {
		fmt.Printf("%s %-40s refused: %v\n", prefix, name, err)
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "attack" {
		attack()
		return
	}
	// init: the watcher's stand-in, PID 1 of the pod.
	fmt.Printf("init pid=%d uid=%d euid=%d\n", os.Getpid(), os.Getuid(), os.Geteuid())
	st, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(l, "Cap") || strings.HasPrefix(l, "NoNewPrivs") || strings.HasPrefix(l, "Seccomp") || strings.HasPrefix(l, "Uid") {
			fmt.Println("init", l)
		}
	}
	m, _ := os.ReadFile("/proc/self/uid_map")
	fmt.Printf("init uid_map: %q\n", strings.TrimSpace(string(m)))
	// (a) a user namespace made by the watcher.
	cmd := exec.Command("/bin/sh", "-c", "id; cat /proc/self/uid_map")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}, GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}}
	out, err := cmd.CombinedOutput()
	try("clone(CLONE_NEWUSER) by the watcher", err)
	fmt.Printf("   output %q\n", out)
	try("unshare(CLONE_NEWUSER) by the watcher", func() error {
		done := make(chan error)
		go func() {
			// The thread is never returned to the pool: it may be in a
			// user namespace of its own.
			runtime.LockOSThread()
			done <- unix.Unshare(unix.CLONE_NEWUSER)
		}()
		return <-done
	}())
	// The watcher catches and forwards SIGTERM; so does the stand-in.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for s := range sigs {
			fmt.Println("init caught", s)
		}
	}()
	// (b) hide the watcher: not dumpable; its secrets and the "stream".
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Println("PR_SET_DUMPABLE:", err)
	}
	os.Setenv("WATCHER_SECRET", "s3cr3t-in-watcher-env")
	// A pipe stands in for the control stream's descriptors.
	r, w, _ := os.Pipe()
	fmt.Printf("init control stream stand-in fds r=%d w=%d\n", r.Fd(), w.Fd())
	// The walled attacker first: the other one lowers PID 1's limits.
	for _, mode := range []string{"walled", "plain"} {
		a := exec.Command("/proc/self/exe", "attack", mode)
		a.Stdout, a.Stderr = os.Stdout, os.Stderr
		a.Env = []string{"PATH=/bin"}
		a.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := a.Start(); err != nil {
			fmt.Println("start attacker:", err)
			continue
		}
		err = a.Wait()
		fmt.Printf("init: %s attacker ended: %v; init still alive\n", mode, err)
	}
	var rl unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_CPU, &rl)
	fmt.Printf("init RLIMIT_CPU now cur=%d max=%d\n", rl.Cur, rl.Max)
	fmt.Println("PROBE DONE")
	time.Sleep(time.Hour)
}

func attack() {
	fmt.Printf("attacker pid=%d uid=%d\n", os.Getpid(), os.Getuid())
	unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	if len(os.Args) > 2 && os.Args[2] == "walled" {
		prefix = "WALLED"
		if err := walls(); err != nil {
			fmt.Println("WALLS FAILED:", err)
			return
		}
	}
	try("kill(1, SIGTERM)", unix.Kill(1, unix.SIGTERM))
	try("kill(1, SIGKILL)", unix.Kill(1, unix.SIGKILL))
	time.Sleep(200 * time.Millisecond)
	try("kill(1, 0) init still there", unix.Kill(1, 0))
	ents, _ := os.ReadDir("/proc/1/task")
	fmt.Printf("attacker sees %d threads of pid 1\n", len(ents))
	for _, e := range ents {
		var tid int
		fmt.Sscan(e.Name(), &tid)
		if tid != 1 {
			try("tgkill(1, "+e.Name()+", SIGKILL)", unix.Tgkill(1, tid, unix.SIGKILL))
			try("tgkill(1, "+e.Name()+", SIGSTOP)", unix.Tgkill(1, tid, unix.SIGSTOP))
			break
		}
	}
	try("kill(1, SIGSTOP)", unix.Kill(1, unix.SIGSTOP))
	try("ptrace(PTRACE_ATTACH, 1)", unix.PtraceAttach(1))
	try("ptrace(PTRACE_SEIZE, 1)", unix.PtraceSeize(1))
	for _, p := range []string{"/proc/1/fd/0", "/proc/1/fd/1", "/proc/1/environ", "/proc/1/mem", "/proc/1/maps", "/proc/1/cwd/.", "/proc/1/root/."} {
		f, err := os.Open(p)
		if err == nil {
			b := make([]byte, 64)
			n, _ := f.Read(b)
			f.Close()
			fmt.Printf("   read %q\n", b[:n])
		}
		try("open "+p, err)
	}
	_, err := os.ReadDir("/proc/1/fd")
	try("readdir /proc/1/fd", err)
	f, err := os.OpenFile("/proc/1/fd/4", os.O_WRONLY, 0)
	if err == nil {
		f.Close()
	}
	try("open /proc/1/fd/4 for write", err)
	buf := make([]byte, 16)
	local := []unix.Iovec{{Base: &buf[0], Len: 16}}
	remote := []unix.RemoteIovec{{Base: uintptr(0x400000), Len: 16}}
	_, err = unix.ProcessVMReadv(1, local, remote, 0)
	try("process_vm_readv(1)", err)
	_, err = unix.ProcessVMWritev(1, local, remote, 0)
	try("process_vm_writev(1)", err)
	pidfd, _, e := unix.Syscall(unix.SYS_PIDFD_OPEN, 1, 0, 0)
	try("pidfd_open(1)", errno(e))
	if e == 0 {
		for fd := uintptr(0); fd < 10; fd++ {
			_, _, e = unix.Syscall(unix.SYS_PIDFD_GETFD, pidfd, fd, 0)
			try(fmt.Sprintf("pidfd_getfd(1, %d)", fd), errno(e))
		}
	}
	_, _, e = unix.Syscall(unix.SYS_KCMP, 1, uintptr(os.Getpid()), 0)
	try("kcmp(1, self, KCMP_FILE...)", errno(e))
	try("prlimit(1, RLIMIT_CPU, 1s)", unix.Prlimit(1, unix.RLIMIT_CPU, &unix.Rlimit{Cur: 1000, Max: 1000}, nil))
	try("prlimit(1, RLIMIT_NOFILE, 3)", unix.Prlimit(1, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 3, Max: 3}, nil))
	try("setpriority(PRIO_PROCESS, 1, 19)", unix.Setpriority(unix.PRIO_PROCESS, 1, 19))
	try("sched_setaffinity(1)", unix.SchedSetaffinity(1, &unix.CPUSet{1}))
	try("unshare(CLONE_NEWUSER) by the attacker", unix.Unshare(unix.CLONE_NEWUSER))
	cg, _ := os.ReadFile("/proc/self/cgroup")
	fmt.Printf("attacker cgroup: %q\n", strings.TrimSpace(string(cg)))
	for _, p := range []string{"/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/pids/cgroup.procs", "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/cgroup.freeze", "/sys/fs/cgroup/freezer/freezer.state"} {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		try("open for write "+p, err)
	}
	try("open /proc/1/oom_score_adj for write", func() error {
		f, err := os.OpenFile("/proc/1/oom_score_adj", os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		return err
	}())
}

func errno(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// walls are what a restricted mode would add to the agent: a Landlock
// domain scoping its signals (PID 1 is outside it), and a seccomp filter
// that lets the calls taking a pid act on the caller alone (pid 0).
// The process is single-threaded enough here: Go's other threads do not
// run the attacks, and the filter goes on every thread (TSYNC).
func walls() error {
	runtime.LockOSThread()
	attr := unix.LandlockRulesetAttr{Scoped: unix.LANDLOCK_SCOPE_SIGNAL}
	size := unsafe.Offsetof(attr.Scoped) + unsafe.Sizeof(attr.Scoped)
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", e)
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		arch = 0xc000003e // AUDIT_ARCH_X86_64
	)
	prog := []unix.SockFilter{
		{Code: ld, K: 4}, {Code: jeq, Jt: 1, K: arch}, {Code: ret, K: unix.SECCOMP_RET_KILL_PROCESS},
	}
	for _, c := range []struct{ nr, arg uint32 }{
		{unix.SYS_PRLIMIT64, 0}, {unix.SYS_SETPRIORITY, 1}, {unix.SYS_SCHED_SETAFFINITY, 0},
		{unix.SYS_SCHED_SETSCHEDULER, 0}, {unix.SYS_SCHED_SETPARAM, 0}, {unix.SYS_SCHED_SETATTR, 0},
		{unix.SYS_IOPRIO_SET, 1},
	} {
		prog = append(prog,
			unix.SockFilter{Code: ld, K: 0},
			unix.SockFilter{Code: jeq, Jf: 4, K: c.nr},
			unix.SockFilter{Code: ld, K: 16 + 8*c.arg},
			unix.SockFilter{Code: jeq, Jf: 1, K: 0},
			unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW},
			unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		)
	}
	prog = append(prog, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW})
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fp))); e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	return nil
}
