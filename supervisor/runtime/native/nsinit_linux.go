package native

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"deathwatch/shared"
	"deathwatch/shared/boxinit"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// NsinitArg is the hidden first argument of the supervisor binary that
// makes it a placeholder holding a user namespace open until its stdin
// ends (see idmapUserns): Main hands over to NsinitMain before it does
// anything else. The box's init stage itself is the watcher binary's
// (boxinit.Arg).
const NsinitArg = "__nsinit"

// nsinitHoldArg (after NsinitArg) names the placeholder.
const nsinitHoldArg = "hold-userns"

// nsinitMarker is the environment of the copy of the program that
// idmapUserns starts, which the package's init checks before the
// program's main can run (nsinitCopy).
const nsinitMarker = "DEATHWATCH_NSINIT=" + nsinitHoldArg

// nsinitCopy says whether this process is idmapUserns's copy of the
// program: the marker in its environment and the hidden arguments.
func nsinitCopy(args, env []string) bool {
	return len(args) > 2 && args[1] == NsinitArg && args[2] == nsinitHoldArg && len(env) == 1 && env[0] == nsinitMarker
}

// Descriptors the native runtime hands to the init stage.
const (
	nsinitControlFD  = boxinit.ControlFD  // the box's end of the control socketpair; stays fd 3 for the watcher (--control=fd:3)
	nsinitSettingsFD = boxinit.SettingsFD // settings in, error text out; closed once the watcher runs
	nsinitFirstExtra = boxinit.FirstExtra // cgroup files and trees (fd 5 is stage 2's settings pipe)
)

// Where the watcher sits inside every native box: on the box's own
// /dev tmpfs (which exists in any root), bind-mounted read-only.
const (
	boxWatcherDir  = "/dev/.deathwatch"
	boxWatcherPath = boxWatcherDir + "/watcher"
)

// fsOp is one step of the box's file-system setup; nsinitConfig is
// everything the init stage does, worked out by the supervisor as plain
// data. The watcher binary applies them in the box (package boxinit).
type (
	fsOp         = shared.FsOp
	nsinitConfig = shared.BoxInit
)

// hostDevices are bind-mounted from the host into the box's /dev.
var hostDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// reservedTargets are mount points the box's setup owns.
var reservedTargets = []string{"/", "/proc", "/dev"}

// Default bounds of the box's own tmpfs folders. Their pages are
// charged to the memory cgroup of the process that writes them (the
// box's), and the inode counts bound a flood of empty files.
const (
	TmpSize  = "size=1g,nr_inodes=262144"
	ShmSize  = "size=256m,nr_inodes=16384"
	devTmpfs = "mode=0755,size=1m,nr_inodes=4096"
)

// minimalRootDirs are the host trees a box on the host root sees (all
// read-only): what commands need. Nothing else of the host is there: no
// /run, /var/run, /tmp, /var/tmp, /home, /root, /srv, /mnt, /media, so
// no host socket can be reached by its path.
var minimalRootDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// minimalEtc is the filtered /etc of the minimal root: names, libraries,
// time, certificates and shell set-up; no credentials, no service
// configuration (a file the host lets others read is still only
// readable, never writable).
var minimalEtc = []string{
	"passwd", "group", "hosts", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf",
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "alternatives",
	"ssl", "ca-certificates", "ca-certificates.conf", "pki", "os-release", "lsb-release",
	"debian_version", "alpine-release", "redhat-release", "profile", "profile.d", "bash.bashrc",
	"environment", "inputrc", "mime.types", "protocols", "services", "shells", "terminfo", "magic", "magic.mime",
}

// hostView is how the planner looks at the host root (a fake in tests).
type hostView interface {
	Lstat(p string) (os.FileInfo, error)
	Readlink(p string) (string, error)
}

type osView struct{}

func (osView) Lstat(p string) (os.FileInfo, error) { return os.Lstat(p) }
func (osView) Readlink(p string) (string, error)   { return os.Readlink(p) }

// hostRoot is what the planner reads the host root through.
var hostRoot hostView = osView{}

// minimalRootOps fill the minimal root: its own mount points, then the
// host trees and the filtered /etc, read-only; links stay links.
func minimalRootOps(h hostView) []fsOp {
	ops := []fsOp{
		{Op: "mkdir", Target: "/proc", Mode: 0o555},
		{Op: "mkdir", Target: "/dev", Mode: 0o755},
		{Op: "mkdir", Target: "/sys", Mode: 0o555},
		{Op: "mkdir", Target: "/tmp", Mode: 0o1777},
		{Op: "mkdir", Target: "/etc", Mode: 0o755},
		{Op: "mkdir", Target: "/var", Mode: 0o755},
	}
	add := func(p string) {
		fi, err := h.Lstat(p)
		if err != nil {
			return
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			if link, err := h.Readlink(p); err == nil {
				ops = append(ops, fsOp{Op: "symlink", Source: link, Target: p})
			}
		case fi.IsDir() || fi.Mode().IsRegular():
			ops = append(ops, fsOp{Op: "bind", Source: p, Target: p, ReadOnly: true, Mkdir: true, Flags: unix.MS_NOSUID | unix.MS_NODEV})
		}
	}
	for _, d := range minimalRootDirs {
		add(d)
	}
	for _, e := range minimalEtc {
		add("/etc/" + e)
	}
	return ops
}

// inMinimalRoot reports whether path p of a box on the host root lies in
// what the minimal root shows of the host (and so exists only if the
// host has it), and under which host tree.
func inMinimalRoot(p string) (string, bool) {
	for _, d := range minimalRootDirs {
		if under(p, d) {
			return d, true
		}
	}
	for _, e := range minimalEtc {
		if under(p, "/etc/"+e) {
			return "/etc/" + e, true
		}
	}
	return "", false
}

// nsinitPlan works out the init stage's settings for a box. root is the
// host folder for the box's / ("/": the minimal root, see
// minimalRootDirs); watcher is the host path of the static watcher.
func nsinitPlan(b *supervisor.Box, root, watcher string, userns bool) (nsinitConfig, error) {
	if !filepath.IsAbs(root) {
		return nsinitConfig{}, fmt.Errorf("root %q is not an absolute path", root)
	}
	if !filepath.IsAbs(watcher) {
		return nsinitConfig{}, fmt.Errorf("watcher %q is not an absolute path", watcher)
	}
	var network string
	switch b.Network {
	case "", "none":
		network = "none"
	case "host":
		network = "host"
	default:
		return nsinitConfig{}, exitcode.Refused("network %q: the native runtime offers none or host", b.Network)
	}
	const (
		nosuid = unix.MS_NOSUID
		nodev  = unix.MS_NODEV
		noexec = unix.MS_NOEXEC
	)
	var ops []fsOp
	minimal := root == "/"
	if minimal {
		ops = minimalRootOps(hostRoot)
	}
	if network == "none" {
		// The box's own network namespace in /sys (only lo), read-only,
		// instead of the host's devices.
		ops = append(ops, fsOp{Op: "mount", Source: "sysfs", Target: "/sys", Flags: unix.MS_RDONLY | nosuid | nodev | noexec, Optional: true})
	}
	ops = append(ops,
		fsOp{Op: "mount", Source: "proc", Target: "/proc", Flags: nosuid | nodev | noexec},
		// Kernel-wide knobs stay read-only even for an agent allowed uid 0.
		fsOp{Op: "rebind-ro", Target: "/proc/sys"},
		fsOp{Op: "rebind-ro", Target: "/proc/sysrq-trigger"},
		fsOp{Op: "mount", Source: "tmpfs", Target: "/dev", Flags: nosuid | noexec, Data: devTmpfs},
	)
	for _, d := range hostDevices {
		ops = append(ops,
			fsOp{Op: "file", Target: "/dev/" + d, Mode: 0o666},
			fsOp{Op: "bind", Source: "/dev/" + d, Target: "/dev/" + d})
	}
	ops = append(ops,
		fsOp{Op: "mkdir", Target: "/dev/pts", Mode: 0o755},
		fsOp{Op: "mount", Source: "devpts", Target: "/dev/pts", Flags: nosuid | noexec, Data: "newinstance,ptmxmode=0666,mode=0620"},
		fsOp{Op: "symlink", Source: "pts/ptmx", Target: "/dev/ptmx"},
		fsOp{Op: "mkdir", Target: "/dev/shm", Mode: 0o1777},
		fsOp{Op: "mount", Source: "tmpfs", Target: "/dev/shm", Flags: nosuid | nodev, Data: "mode=1777," + ShmSize},
		fsOp{Op: "symlink", Source: "/proc/self/fd", Target: "/dev/fd"},
		fsOp{Op: "symlink", Source: "/proc/self/fd/0", Target: "/dev/stdin"},
		fsOp{Op: "symlink", Source: "/proc/self/fd/1", Target: "/dev/stdout"},
		fsOp{Op: "symlink", Source: "/proc/self/fd/2", Target: "/dev/stderr"},
		fsOp{Op: "mkdir", Target: boxWatcherDir, Mode: 0o755},
		fsOp{Op: "file", Target: boxWatcherPath, Mode: 0o755},
		fsOp{Op: "bind", Source: watcher, Target: boxWatcherPath, ReadOnly: true, Flags: nosuid | nodev},
		fsOp{Op: "mount", Source: "tmpfs", Target: "/tmp", Flags: nosuid | nodev, Data: "mode=1777," + TmpSize},
	)
	mounts := append([]supervisor.Mount(nil), b.Mounts...)
	sort.SliceStable(mounts, func(i, j int) bool { return mounts[i].Target < mounts[j].Target })
	for _, m := range mounts {
		if !filepath.IsAbs(m.Source) {
			return nsinitConfig{}, fmt.Errorf("mount source %q is not an absolute path", m.Source)
		}
		if !path.IsAbs(m.Target) || path.Clean(m.Target) != m.Target {
			return nsinitConfig{}, fmt.Errorf("mount target %q is not a clean absolute path", m.Target)
		}
		for _, r := range reservedTargets {
			if m.Target == r || (r != "/" && strings.HasPrefix(m.Target, r+"/")) {
				return nsinitConfig{}, fmt.Errorf("mount target %q: %s belongs to the box's own setup", m.Target, r)
			}
		}
		// No set-id program and no device node of a --mount works in
		// the box.
		ops = append(ops, fsOp{Op: "bind", Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly, Mkdir: true, Idmap: true, Flags: nosuid | nodev})
	}
	// /dev is complete: make its tmpfs read-only (pts and shm stay as they are).
	ops = append(ops, fsOp{Op: "readonly", Target: "/dev"})
	if minimal {
		ops = append(ops, fsOp{Op: "readonly", Target: "/"})
		root = ""
	}
	host := b.Name
	if len(host) > 63 {
		host = host[:63]
	}
	return nsinitConfig{
		Root:       root,
		Ops:        ops,
		Hostname:   host,
		LoopbackUp: network == "none",
		Exec:       boxWatcherPath,
		Argv:       []string{"watcher", fmt.Sprintf("--control=fd:%d", nsinitControlFD)},
		Env:        append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, supervisor.WatcherEnv...),
		Reexec:     userns,
	}, nil
}

// NsinitMain is the placeholder of NsinitArg. It returns when its stdin
// ends.
func NsinitMain() int {
	if len(os.Args) > 2 && os.Args[2] == nsinitHoldArg {
		// A user namespace for an idmapped mount: the supervisor opens
		// /proc/PID/ns/user, then closes our stdin.
		io.Copy(io.Discard, os.Stdin)
		return 0
	}
	fmt.Fprintf(os.Stderr, "supervisor: %s is the native runtime's internal placeholder; it is not run by hand\n", NsinitArg)
	return shared.ExitUsage
}
