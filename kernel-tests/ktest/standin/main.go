// Command standin is the kernel tests' stand-in controller: a separate
// process that holds the host end of a watcher's control stream, so that
// a test can SIGKILL (or SIGSTOP) "the controller" and watch what the
// watcher does. It only relays bytes; the test speaks the protocol.
//
//	standin relay       fd 3: the stream towards the watcher (written);
//	standin relay-both  and fd 4: the stream from the watcher (read).
//	                stdin → fd 3 and fd 4 → stdout. At EOF on stdin it
//	                closes its write side (shutdown for a socket), which
//	                the watcher sees as EOF; it exits when both sides end.
//
//	standin sigdefault -- CMD ARGS
//	                execs CMD with every signal at its default action. GNU
//	                make starts its commands with signals 32 and 33 ignored
//	                (and glibc's sigaction, so `env --default-signal`,
//	                refuses to touch them); this resets them with the raw
//	                system call.
//
//	standin probe   run as the agent: prints KEY=VALUE lines about what
//	                the agent can do to PID 1 of its namespace (signal,
//	                ptrace, read environ and fds).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: standin relay|relay-both|probe")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "relay":
		os.Exit(relay(false))
	case "relay-both":
		os.Exit(relay(true))
	case "probe":
		probe()
	case "sigdefault":
		os.Exit(sigDefault(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "standin: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

func relay(both bool) int {
	toWatcher := os.NewFile(3, "to-watcher")
	fromDone := make(chan struct{})
	if both {
		fromWatcher := os.NewFile(4, "from-watcher")
		go func() {
			defer close(fromDone)
			_, _ = io.Copy(os.Stdout, fromWatcher)
		}()
	} else {
		close(fromDone)
		fromDone = nil // no read side: live until stdin ends
	}
	toDone := make(chan struct{})
	go func() {
		defer close(toDone)
		if _, err := io.Copy(toWatcher, os.Stdin); err != nil {
			fmt.Fprintf(os.Stderr, "standin: relay to watcher: %v\n", err)
		}
		// End our write side: shutdown for a socket (fd 4 may share it),
		// close for a pipe.
		if err := syscall.Shutdown(3, syscall.SHUT_WR); err != nil {
			_ = toWatcher.Close()
		}
	}()
	// The watcher closing its side ends the run; so does the test closing
	// ours when there is nothing to read.
	select {
	case <-fromDone:
	case <-toDone:
		if fromDone != nil {
			<-fromDone
		}
	}
	return 0
}

func errno(err error) string {
	if err == nil {
		return "ok"
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		switch en {
		case syscall.EPERM:
			return "EPERM"
		case syscall.EACCES:
			return "EACCES"
		case syscall.ESRCH:
			return "ESRCH"
		case syscall.ENOENT:
			return "ENOENT"
		}
		return fmt.Sprintf("errno%d", int(en))
	}
	return "error:" + err.Error()
}

func probe() {
	fmt.Printf("uid=%d euid=%d gid=%d egid=%d\n", os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid())
	fmt.Printf("kill0=%s\n", errno(syscall.Kill(1, 0)))
	// SIGKILL and SIGTERM would end the box if they got through: they
	// must fail. SIGCONT is allowed within a session by the kernel
	// whatever the uids; it does nothing to a running process.
	fmt.Printf("killkill=%s\n", errno(syscall.Kill(1, syscall.SIGKILL)))
	fmt.Printf("killterm=%s\n", errno(syscall.Kill(1, syscall.SIGTERM)))
	fmt.Printf("killhup=%s\n", errno(syscall.Kill(1, syscall.SIGHUP)))
	fmt.Printf("killusr1=%s\n", errno(syscall.Kill(1, syscall.SIGUSR1)))
	fmt.Printf("killstop=%s\n", errno(syscall.Kill(1, syscall.SIGSTOP)))
	fmt.Printf("killcont=%s\n", errno(syscall.Kill(1, syscall.SIGCONT)))
	sid, _, _ := syscall.RawSyscall(syscall.SYS_GETSID, 0, 0, 0)
	fmt.Printf("sid=%d\n", sid)
	self, _ := os.Readlink("/proc/self")
	fmt.Printf("pid=%d\nprocself=%s\n", os.Getpid(), self)
	runtime.LockOSThread()
	err := syscall.PtraceAttach(1)
	fmt.Printf("ptrace=%s\n", errno(err))
	if err == nil {
		_ = syscall.PtraceDetach(1)
	}
	const ptraceSeize = 0x4206
	if _, _, en := syscall.Syscall6(syscall.SYS_PTRACE, ptraceSeize, 1, 0, 0, 0, 0); en != 0 {
		fmt.Printf("ptraceseize=%s\n", errno(en))
	} else {
		fmt.Printf("ptraceseize=ok\n")
		_ = syscall.PtraceDetach(1)
	}
	_, err = os.ReadFile("/proc/1/environ")
	fmt.Printf("environ=%s\n", errno(unwrapPath(err)))
	_, err = os.ReadDir("/proc/1/fd")
	fmt.Printf("fds=%s\n", errno(unwrapPath(err)))
	_, err = os.Readlink("/proc/1/fd/0")
	fmt.Printf("fd0=%s\n", errno(unwrapPath(err)))
	_, err = os.ReadFile("/proc/1/mem")
	fmt.Printf("mem=%s\n", errno(unwrapPath(err)))
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// sigDefault sets every signal but SIGKILL and SIGSTOP to SIG_DFL with
// rt_sigaction(2) itself, then execs argv (after "--").
func sigDefault(argv []string) int {
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "usage: standin sigdefault -- CMD ARGS")
		return 2
	}
	// struct kernel_sigaction on amd64 and arm64: handler, flags,
	// restorer, mask. SIG_DFL is a zero handler.
	var sa struct{ handler, flags, restorer, mask uint64 }
	for sig := 1; sig <= 64; sig++ {
		if sig == int(syscall.SIGKILL) || sig == int(syscall.SIGSTOP) {
			continue
		}
		syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "standin sigdefault: %v\n", err)
		return 127
	}
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "standin sigdefault: exec %s: %v\n", path, err)
	return 126
}
