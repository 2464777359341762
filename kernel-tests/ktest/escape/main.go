// Command escape plays the attacker inside a box, as the agent: it tries
// what a local-root exploit or a key thief needs and prints one
// NAME=RESULT line per attempt (RESULT is "ok" or the errno's name), so
// the kernel tests assert what the attacker got, not what the code
// intended.
//
//	escape calls          the kernel surface (keyctl, bpf, io_uring, ...)
//	escape keys SERIAL    read key SERIAL; plant a key in the session keyring
//	escape x32            a syscall through the x32 ABI (amd64)
//	escape oom-score      the agent's oom_score_adj
//	escape connect PATH…  connect to each unix socket (connect:PATH=…)
//	escape read PATH…     read each file (read:PATH=…)
//	escape ls PATH…       list each folder (ls:PATH=names, comma-separated)
//	escape rss MIB        allocate and touch MIB MiB, say "ready", then wait
//	escape statfs PATH…   size and inodes of each file system (statfs:PATH=BYTES/INODES)
//	escape stat PATH…     owner of each file (stat:PATH=UID:GID)
//	escape write PATH…    create each file, mode 0600 (write:PATH=…)
//	escape create PATH…   open each for writing, made if missing, nothing written (create:PATH=…)
//	escape kill PID…      signal 0 to each process (kill:PID=…)
//	escape ptrace PID…    attach to each process (ptrace:PID=…)
//	escape pin PATH…      make each file immutable (pin:PATH=…)
//	escape setid DST…     copy this program to each DST and chmod it 06755 (setid:DST=…)
//	escape mountopts PATH… the options of the mount at each path (mountopts:PATH=rw,nosuid,…)
//	escape forks N        fork up to N children that wait (forks=COUNT/ERRNO), then end them
//	escape filter DIR     the allowlist: socket families, calls it does not
//	                      name, NUMA policy, set-id modes on a file in DIR
//	escape abstract-self  listen on an abstract socket and connect to it
//	escape kill-cmd ARG…  say uid=UID:GID, wait for another process whose
//	                      argv is ARG…, signal 0 to it (kill-cmd=…)
//	escape cgroup-leave   leave its cgroup every way it can name (see
//	                      escapeCgroupLeave)
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"deathwatch/kernel-tests/ktest/immutable"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: escape calls|keys SERIAL|x32|oom-score")
		os.Exit(2)
	}
	switch args[0] {
	case "calls":
		escapeCalls()
	case "keys":
		serial, _ := strconv.Atoi(args[1])
		escapeKeys(serial)
	case "x32":
		if runtime.GOARCH != "amd64" {
			fmt.Println("x32=not-amd64")
			return
		}
		_, _, e := unix.RawSyscall(0x40000000|unix.SYS_GETPID, 0, 0, 0)
		fmt.Println("x32=" + result(e)) // reached only when not killed
	case "connect":
		for _, p := range args[1:] {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				err = unix.Connect(fd, &unix.SockaddrUnix{Name: p})
				unix.Close(fd)
			}
			fmt.Printf("connect:%s=%s\n", p, errName(err))
		}
	case "read":
		for _, p := range args[1:] {
			b, err := os.ReadFile(p)
			r := errName(err)
			if err == nil {
				r = "ok:" + strings.TrimSpace(string(b))
			}
			fmt.Printf("read:%s=%s\n", p, r)
		}
	case "ls":
		for _, p := range args[1:] {
			es, err := os.ReadDir(p)
			var names []string
			for _, e := range es {
				names = append(names, e.Name())
			}
			if err != nil {
				names = []string{errName(err)}
			}
			fmt.Printf("ls:%s=%s\n", p, strings.Join(names, ","))
		}
	case "rss":
		mib, _ := strconv.Atoi(args[1])
		mem, err := unix.Mmap(-1, 0, mib<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			fmt.Println("rss=" + errName(err))
			os.Exit(1)
		}
		for i := 0; i < len(mem); i += 4096 {
			mem[i] = 1
		}
		fmt.Println("ready")
		// Held until killed. Not select{}: with no other goroutine the
		// runtime calls that a deadlock and exits, freeing the memory
		// before the kill it is there to weigh on.
		for {
			unix.Pause()
		}
	case "statfs":
		for _, p := range args[1:] {
			var st unix.Statfs_t
			if err := unix.Statfs(p, &st); err != nil {
				fmt.Printf("statfs:%s=%s\n", p, errName(err))
				continue
			}
			fmt.Printf("statfs:%s=%d/%d\n", p, st.Blocks*uint64(st.Bsize), st.Files)
		}
	case "stat":
		for _, p := range args[1:] {
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				fmt.Printf("stat:%s=%s\n", p, errName(err))
				continue
			}
			fmt.Printf("stat:%s=%d:%d\n", p, st.Uid, st.Gid)
		}
	case "write":
		for _, p := range args[1:] {
			fmt.Printf("write:%s=%s\n", p, errName(os.WriteFile(p, []byte("written by the agent"), 0o600)))
		}
	case "create":
		for _, p := range args[1:] {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o600)
			if err == nil {
				f.Close()
			}
			fmt.Printf("create:%s=%s\n", p, errName(err))
		}
	case "kill":
		for _, a := range args[1:] {
			pid, _ := strconv.Atoi(a)
			fmt.Printf("kill:%s=%s\n", a, errName(unix.Kill(pid, 0)))
		}
	case "ptrace":
		runtime.LockOSThread()
		for _, a := range args[1:] {
			pid, _ := strconv.Atoi(a)
			err := unix.PtraceAttach(pid)
			if err == nil {
				unix.PtraceDetach(pid)
			}
			fmt.Printf("ptrace:%s=%s\n", a, errName(err))
		}
	case "pin":
		// Make a file immutable (FS_IMMUTABLE_FL): one in the box's own
		// writable layer would make the engine's removal of the box fail.
		for _, p := range args[1:] {
			fmt.Printf("pin:%s=%s\n", p, errName(immutable.Set(p, true)))
		}
	case "setid":
		// A set-id copy of a program: on the host, whoever runs it
		// would get its owner's ids.
		self, err := os.ReadFile("/proc/self/exe")
		for _, p := range args[1:] {
			if err == nil {
				err = os.WriteFile(p, self, 0o755)
			}
			if err == nil {
				err = unix.Chmod(p, 0o6755)
			}
			fmt.Printf("setid:%s=%s\n", p, errName(err))
		}
	case "mountopts":
		info, err := os.ReadFile("/proc/self/mountinfo")
		for _, p := range args[1:] {
			r := errName(err)
			if err == nil {
				r = "ENOENT"
				for _, line := range strings.Split(string(info), "\n") {
					// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ...
					if f := strings.Fields(line); len(f) > 5 && f[4] == p {
						r = f[5] // the last mount there is the one seen
					}
				}
			}
			fmt.Printf("mountopts:%s=%s\n", p, r)
		}
	case "forks":
		// A fork bomb of bare forks: each child is one process (a Go
		// child started by exec would be several threads), waiting in
		// pause(2) until it is killed.
		n, _ := strconv.Atoi(args[1])
		runtime.LockOSThread()
		var kids []int
		res := "ok"
		for len(kids) < n {
			pid, _, e := syscall.RawSyscall(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0)
			if e != 0 {
				res = errName(e)
				break
			}
			if pid == 0 {
				for {
					syscall.RawSyscall(syscall.SYS_PAUSE, 0, 0, 0)
				}
			}
			kids = append(kids, int(pid))
		}
		fmt.Printf("forks=%d/%s\n", len(kids), res)
		for _, k := range kids {
			unix.Kill(k, unix.SIGKILL)
		}
		for range kids {
			var ws unix.WaitStatus
			unix.Wait4(-1, &ws, 0, nil)
		}
	case "filter":
		escapeFilter(args[1])
	case "abstract-self":
		escapeAbstractSelf()
	case "kill-cmd":
		escapeKillCmd(args[1:])
	case "cgroup-leave":
		escapeCgroupLeave(false)
	case "cgroup-leave-nested":
		escapeCgroupLeave(true)
	case "oom-score":
		b, err := os.ReadFile("/proc/self/oom_score_adj")
		fmt.Printf("oom_score_adj=%s%v\n", strings.TrimSpace(string(b)), errOrEmpty(err))
	}
}

// errName is "ok" or the errno's name (ENOENT, EACCES, ...).
func errName(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return result(e)
	}
	return err.Error()
}

func errOrEmpty(err error) string {
	if err != nil {
		return " " + err.Error()
	}
	return ""
}

func result(e syscall.Errno) string {
	if e == 0 {
		return "ok"
	}
	return unix.ErrnoName(e)
}

func escapeCalls() {
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			fmt.Println("seccomp=" + strings.TrimSpace(v))
		}
	}
	try := func(name string, trap uintptr, a ...uintptr) {
		a = append(a, 0, 0, 0, 0, 0, 0)
		r, _, e := unix.Syscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
		if e == 0 && name != "personality-query" {
			_ = unix.Close(int(r)) // a descriptor for the calls that make one
		}
		fmt.Println(name + "=" + result(e))
	}
	// KEYCTL_GET_KEYRING_ID of the session keyring.
	try("keyctl", unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(int64(unix.KEY_SPEC_SESSION_KEYRING)&0xffffffff), 0)
	desc, _ := unix.BytePtrFromString("dw-escape")
	kt, _ := unix.BytePtrFromString("user")
	try("add_key", unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(kt)), uintptr(unsafe.Pointer(desc)), 0, 0, uintptr(int64(unix.KEY_SPEC_PROCESS_KEYRING)&0xffffffff))
	// BPF_PROG_LOAD of nothing: EINVAL or EPERM from the kernel, EPERM from the filter.
	var attr [128]byte
	try("bpf", unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	pe := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Bits: unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
	try("perf_event_open", unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&pe)), 0, ^uintptr(0), ^uintptr(0), 0)
	var params [120]byte
	try("io_uring_setup", unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])))
	try("userfaultfd", unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1 /* UFFD_USER_MODE_ONLY */)
	src, _ := unix.BytePtrFromString("none")
	dst, _ := unix.BytePtrFromString("/tmp")
	fs, _ := unix.BytePtrFromString("tmpfs")
	try("mount", unix.SYS_MOUNT, uintptr(unsafe.Pointer(src)), uintptr(unsafe.Pointer(dst)), uintptr(unsafe.Pointer(fs)), 0, 0)
	try("fsopen", unix.SYS_FSOPEN, uintptr(unsafe.Pointer(fs)), 0)
	try("personality-query", unix.SYS_PERSONALITY, 0xffffffff)
	try("clone3", unix.SYS_CLONE3, 0, 0)
	// A child in a new user namespace through clone (Go cannot unshare
	// a user namespace from a process that has threads).
	cmd := exec.Command("/proc/self/exe", "oom-score")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	var errno syscall.Errno
	switch err := cmd.Run(); {
	case err == nil:
		fmt.Println("clone-newuser=ok")
	case errors.As(err, &errno):
		fmt.Println("clone-newuser=" + result(errno))
	default:
		fmt.Printf("clone-newuser=%v\n", err)
	}
}

func escapeKeys(serial int) {
	buf := make([]byte, 256)
	n, _, e := unix.Syscall6(unix.SYS_KEYCTL, unix.KEYCTL_READ, uintptr(serial), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e == 0 {
		fmt.Printf("read=ok:%s\n", buf[:min(int(n), len(buf))])
	} else {
		fmt.Println("read=" + result(e))
	}
	_, err := unix.AddKey("user", "dw-planted", []byte("PLANTED-BY-AGENT"), unix.KEY_SPEC_SESSION_KEYRING)
	if err != nil {
		fmt.Println("plant=" + result(err.(syscall.Errno)))
	} else {
		fmt.Println("plant=ok")
	}
}

// escapeFilter tries what the allowlist refuses: socket families a box
// does not use (AF_VSOCK reaches a VM host's hypervisor services), a
// call Docker's profile does not name (file_getattr, move_pages), a
// number past every table, the NUMA policy calls, and set-id bits on a
// file of its own (the file's mode after is mode=…) and on the files it
// creates (setid-files= names those that have them).
func escapeFilter(dir string) {
	for _, f := range []struct {
		name         string
		family, kind int
	}{
		{"unix", unix.AF_UNIX, unix.SOCK_DGRAM}, {"inet", unix.AF_INET, unix.SOCK_DGRAM},
		{"netlink", unix.AF_NETLINK, unix.SOCK_DGRAM}, {"vsock", unix.AF_VSOCK, unix.SOCK_STREAM},
		{"alg", unix.AF_ALG, unix.SOCK_SEQPACKET},
	} {
		fd, err := unix.Socket(f.family, f.kind|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		fmt.Printf("socket-%s=%s\n", f.name, errName(err))
	}
	call := func(name string, trap uintptr, a ...uintptr) {
		a = append(a, 0, 0, 0, 0, 0, 0)
		_, _, e := unix.Syscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
		fmt.Println(name + "=" + result(e))
	}
	root, _ := unix.BytePtrFromString("/")
	var attr [64]byte
	cwd := unix.AT_FDCWD
	fdcwd := uintptr(cwd)
	call("file_getattr", unix.SYS_FILE_GETATTR, fdcwd, uintptr(unsafe.Pointer(root)), uintptr(unsafe.Pointer(&attr[0])), 24, 0)
	call("move_pages", unix.SYS_MOVE_PAGES, 0, 0, 0, 0, 0, 0)
	call("nr-1000", 1000)
	call("mbind", unix.SYS_MBIND, 0, 0, 0, 0, 0, 0)
	call("set_mempolicy", unix.SYS_SET_MEMPOLICY, 0, 0, 0)

	f := dir + "/dw-setid"
	if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o644); err != nil {
		fmt.Println("create=" + errName(err))
		return
	}
	path, _ := unix.BytePtrFromString(f)
	p := uintptr(unsafe.Pointer(path))
	fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Println("open=" + errName(err))
		return
	}
	defer unix.Close(fd)
	for _, c := range []struct {
		name string
		trap uintptr
		args []uintptr
	}{
		{"fchmodat-4755", unix.SYS_FCHMODAT, []uintptr{fdcwd, p, 0o4755}},
		{"fchmodat-2755", unix.SYS_FCHMODAT, []uintptr{fdcwd, p, 0o2755}},
		{"fchmod-6755", unix.SYS_FCHMOD, []uintptr{uintptr(fd), 0o6755}},
		{"fchmodat2-4755", unix.SYS_FCHMODAT2, []uintptr{fdcwd, p, 0o4755, 0}},
		{"fchmodat2-2755-nofollow", unix.SYS_FCHMODAT2, []uintptr{fdcwd, p, 0o2755, unix.AT_SYMLINK_NOFOLLOW}},
		{"fchmodat-755", unix.SYS_FCHMODAT, []uintptr{fdcwd, p, 0o755}},
	} {
		call(c.name, c.trap, c.args...)
	}
	if runtime.GOARCH == "amd64" {
		call("chmod-4755", 90 /* SYS_CHMOD */, p, 0o4755)
	}
	var st unix.Stat_t
	if err := unix.Stat(f, &st); err != nil {
		fmt.Println("mode=" + errName(err))
		return
	}
	fmt.Printf("mode=%04o\n", st.Mode&0o7777)

	// Set-id bits given at creation: open, mknod, openat2.
	fd, err = unix.Open(dir+"/dw-open", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o4755)
	if err == nil {
		unix.Close(fd)
	}
	fmt.Println("open-4755=" + errName(err))
	fmt.Println("mknod-2755=" + errName(unix.Mknod(dir+"/dw-mknod", unix.S_IFREG|0o2755, 0)))
	fd, err = unix.Openat2(unix.AT_FDCWD, dir+"/dw-openat2", &unix.OpenHow{Flags: unix.O_CREAT | unix.O_WRONLY | unix.O_CLOEXEC, Mode: 0o4755})
	if err == nil {
		unix.Close(fd)
	}
	fmt.Println("openat2-4755=" + errName(err))
	fd, err = unix.Open(dir+"/dw-open-plain", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o755)
	if err == nil {
		unix.Close(fd)
	}
	fmt.Println("open-755=" + errName(err))
	var setid []string
	for _, n := range []string{"dw-setid", "dw-open", "dw-mknod", "dw-openat2", "dw-open-plain"} {
		if unix.Stat(dir+"/"+n, &st) == nil && st.Mode&0o6000 != 0 {
			setid = append(setid, fmt.Sprintf("%s:%04o", n, st.Mode&0o7777))
		}
	}
	fmt.Println("setid-files=" + strings.Join(setid, ","))
}

// escapeAbstractSelf: an abstract socket of the agent's own is
// reachable (scoping keeps out only what was made outside its domain).
func escapeAbstractSelf() {
	name := fmt.Sprintf("@dw-escape-self-%d", os.Getpid())
	l, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		err = unix.Bind(l, &unix.SockaddrUnix{Name: name})
	}
	if err == nil {
		err = unix.Listen(l, 1)
	}
	if err == nil {
		var c int
		if c, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
			err = unix.Connect(c, &unix.SockaddrUnix{Name: name})
			unix.Close(c)
		}
	}
	unix.Close(l)
	fmt.Println("abstract-self=" + errName(err))
}

// escapeKillCmd waits (30 s at most) for a process that is not its own
// whose argv is argv — one the test starts in the box from outside, as
// the agent's uid — and signals it.
func escapeKillCmd(argv []string) {
	fmt.Printf("uid=%d:%d\n", os.Getuid(), os.Getgid())
	want := strings.Join(argv, "\x00") + "\x00"
	for i := 0; i < 600; i++ {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			if b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); string(b) == want {
				fmt.Printf("kill-cmd=%s\n", errName(unix.Kill(pid, 0)))
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("kill-cmd=not-found")
}
