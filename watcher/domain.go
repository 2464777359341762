package watcher

import (
	"errors"
	"os"
	"runtime"
	"syscall"

	"deathwatch/shared"
)

// When the watcher is PID 1 of a PID namespace, its exit makes the
// kernel kill every process in the namespace: that is the kill domain.
// When it is not PID 1 (sbx exec inside a microVM, a plain shell), it
// runs itself again as PID 1 of a new PID namespace and stays outside
// as a transparent parent; if it cannot, it refuses to run the agent.

// reexecAsInit is the transparent parent. It returns the inner
// watcher's status.
func reexecAsInit(cfg *Config, sigs chan os.Signal) int {
	// Pdeathsig belongs to the thread that forks: keep it for good.
	runtime.LockOSThread()

	files := []uintptr{0, 1, 2}
	if cfg.Control == "fd" {
		for len(files) <= cfg.ControlFD {
			files = append(files, ^uintptr(0)) // closed in the child
		}
		files[cfg.ControlFD] = uintptr(cfg.ControlFD)
	}
	// The inner watcher treats the end of this pipe as the death of its
	// parent: Pdeathsig alone would not do, because the kernel clears it
	// when the inner watcher changes its credentials.
	parentR, parentW, err := os.Pipe()
	if err != nil {
		logf("create the parent pipe: " + err.Error())
		return shared.ExitSetupFailed
	}
	defer parentW.Close()
	parentFD := len(files)
	files = append(files, parentR.Fd())
	attr := &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: files,
		Sys:   &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL},
	}
	argv := append([]string{"watcher", "--parent-fd=" + itoa(parentFD)}, os.Args[1:]...)
	pid, err := syscall.ForkExec("/proc/self/exe", argv, attr)
	if err != nil && os.Geteuid() != 0 && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL)) {
		// Unprivileged: a user namespace makes the PID namespace possible.
		uid, gid := os.Geteuid(), os.Getegid()
		attr.Sys.Cloneflags |= syscall.CLONE_NEWUSER
		attr.Sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.Sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		attr.Sys.GidMappingsEnableSetgroups = false
		pid, err = syscall.ForkExec("/proc/self/exe", argv, attr)
	}
	parentR.Close()
	if err != nil {
		logf("not PID 1 and cannot create a PID namespace (" + err.Error() + "): refusing to start the agent without a kill domain; run the watcher as PID 1 (docker --init-path, unshare --pid --fork) or with CAP_SYS_ADMIN")
		return shared.ExitRefused
	}
	for s := range sigs {
		switch s := s.(syscall.Signal); {
		case s == syscall.SIGCHLD:
			var ws syscall.WaitStatus
			got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			if got == pid || errors.Is(err, syscall.ECHILD) {
				return waitCode(ws)
			}
		case forwarded(s):
			_ = syscall.Kill(pid, s)
		}
	}
	return shared.ExitSetupFailed
}

// mountProc gives the inner watcher, PID 1 of the namespace the outer
// one made, a /proc of that namespace (as `unshare --mount-proc` does),
// in the mount namespace made with it, private so that nothing mounted
// here reaches the outer one. Without it /proc still shows the outer
// namespace: /proc/self names another process, ps fails, job control
// in a shell does not work. A failure (a /proc the kernel will not
// mount again in a user namespace) costs only that, so it is logged.
func mountProc() {
	err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, "")
	if err == nil {
		err = syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "")
	}
	if err != nil {
		logf("mount a /proc for the box's PID namespace: " + err.Error() + "; /proc shows the outer namespace")
	}
}

// waitCode is the exit status that reports ws: the code, or 128+N for
// death by signal N.
func waitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return shared.SignalStatus(int(ws.Signal()))
	}
	return ws.ExitStatus()
}
