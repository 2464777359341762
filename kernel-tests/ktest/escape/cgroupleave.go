package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// escapeCgroupLeave tries to take the agent out of its cgroup, where its
// limits hold it and where the kill of the box reaches it: it writes its
// pid to cgroup.procs (v1 also tasks) of every cgroup it can name — the
// root of each mounted hierarchy, its parent's, the watcher's (PID 1's)
// — through /sys/fs/cgroup and through fresh cgroup2 and v1 mounts, made
// as it is and in new user and mount namespaces of its own, and makes a
// sibling folder in each. It prints cgroup-before= and cgroup-after=
// (its /proc/self/cgroup, ';'-joined) and one line per attempt: procs:FILE,
// mkdir:DIR, mount:FSTYPE, unshare. Every attempt's result is "ok" or
// the errno's name.
func escapeCgroupLeave(nested bool) {
	fmt.Println("cgroup-before=" + ownCgroups())
	for _, dir := range hierarchies("/sys/fs/cgroup") {
		leaveThrough(dir)
	}
	for _, fs := range []struct{ name, typ, opts string }{{"cgroup2", "cgroup2", ""}, {"cgroup", "cgroup", "none,name=dwescape"}, {"cgroup-pids", "cgroup", "pids"}} {
		mnt, err := os.MkdirTemp("", "dw-cg-")
		if err != nil {
			fmt.Printf("mount:%s=%s\n", fs.name, errName(err))
			continue
		}
		err = unix.Mount("none", mnt, fs.typ, 0, fs.opts)
		fmt.Printf("mount:%s=%s\n", fs.name, errName(err))
		if err == nil {
			leaveThrough(mnt)
			unix.Unmount(mnt, unix.MNT_DETACH)
		}
		os.Remove(mnt)
	}
	if !nested {
		// The same in namespaces of its own, where it would be root: a
		// child (unshare(CLONE_NEWUSER) refuses a threaded process).
		self, _ := os.Executable()
		out, err := runNested(self)
		fmt.Printf("unshare=%s\n", errName(err))
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(k, "cgroup-") {
				fmt.Printf("nested:%s=%s\n", k, v)
			}
		}
	}
	fmt.Println("cgroup-after=" + ownCgroups())
}

// runNested runs self cgroup-leave-nested in new user, mount and cgroup
// namespaces, mapped to root there, and returns its output.
func runNested(self string) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer r.Close()
	attr := &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, w.Fd(), w.Fd()},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWCGROUP,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		},
	}
	pid, err := syscall.ForkExec(self, []string{self, "cgroup-leave-nested"}, attr)
	w.Close()
	if err != nil {
		return "", err
	}
	b := new(strings.Builder)
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, 0, nil)
	return b.String(), nil
}

// hierarchies are the cgroup hierarchies mounted at and below root: root
// itself when it is one (v2), else each of its folders that is (v1, and
// v2 at unified on a hybrid host); root alone when none is (the box
// shows none: the attempts there still run). statfs:ROOT= says what is
// mounted there.
func hierarchies(root string) []string {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		fmt.Printf("statfs:%s=%s\n", root, errName(err))
		return []string{root}
	}
	fmt.Printf("statfs:%s=0x%x\n", root, st.Type)
	if st.Type == unix.CGROUP2_SUPER_MAGIC || st.Type == unix.CGROUP_SUPER_MAGIC {
		return []string{root}
	}
	out := []string{root}
	es, _ := os.ReadDir(root)
	for _, e := range es {
		d := filepath.Join(root, e.Name())
		if unix.Statfs(d, &st) == nil && (st.Type == unix.CGROUP2_SUPER_MAGIC || st.Type == unix.CGROUP_SUPER_MAGIC) {
			out = append(out, d)
		}
	}
	return out
}

// leaveThrough tries every way out of the agent's cgroup in the
// hierarchy mounted at mnt.
func leaveThrough(mnt string) {
	pid := []byte(fmt.Sprint(os.Getpid()))
	var st unix.Statfs_t
	v2 := unix.Statfs(mnt, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
	dirs := []string{mnt}
	for _, p := range cgroupPaths("/proc/self/cgroup", v2) {
		dirs = append(dirs, filepath.Join(mnt, p), filepath.Join(mnt, filepath.Dir(p)))
	}
	for _, p := range cgroupPaths("/proc/1/cgroup", v2) {
		dirs = append(dirs, filepath.Join(mnt, p))
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		if seen[d] {
			continue
		}
		seen[d] = true
		for _, f := range []string{"cgroup.procs", "tasks"} {
			p := filepath.Join(d, f)
			if _, err := os.Stat(p); err != nil && f == "tasks" {
				continue // v2 has none
			}
			fh, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err == nil {
				_, err = fh.Write(pid)
				fh.Close()
			}
			fmt.Printf("procs:%s=%s\n", p, errName(err))
		}
		sib := filepath.Join(d, "dw-escape-sibling")
		err := os.Mkdir(sib, 0o755)
		if err == nil {
			os.Remove(sib)
		}
		fmt.Printf("mkdir:%s=%s\n", sib, errName(err))
	}
}

// cgroupPaths are the paths of a /proc/PID/cgroup file's lines of v2
// (hierarchy 0) or of v1 (every other).
func cgroupPaths(file string, v2 bool) []string {
	b, _ := os.ReadFile(file)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && (f[0] == "0") == v2 {
			out = append(out, f[2])
		}
	}
	return out
}

// ownCgroups is /proc/self/cgroup, one line, ';'-joined.
func ownCgroups() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return errName(err)
	}
	return strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", ";")
}
