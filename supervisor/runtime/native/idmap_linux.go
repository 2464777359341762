package native

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"deathwatch/shared"
)

// Idmapped mounts (Linux 5.12+, file system permitting): a root
// supervisor's box runs in a user namespace of its own, so the host
// files of a --mount belong to nobody the box knows. Rather than chown
// them, the mount is idmapped: the owner of the mount's source folder
// (the controller, who filled it) shows in the box as the agent
// (shared.DefaultAgentUID:GID), and what the agent creates lands on the
// host as that owner's. Files of other owners show as nobody (65534).
//
// Without idmapped mounts (an older kernel, or a file system that does
// not support them, e.g. some network or FUSE file systems), a
// read-only --mount is bound as it is, with a warning: its files show as
// nobody, readable where the host lets others read. A read-write one is
// refused, because the agent could not write to it.

// idmapKey is one source owner.
type idmapKey struct{ uid, gid uint32 }

// idmapUserns starts a placeholder process in a new user namespace that
// maps the host owner (uid, gid) onto the agent's host ids of the box
// (base+agent), opens that namespace and ends the placeholder.
func idmapUserns(self string, k idmapKey, base int64) (*os.File, error) {
	cmd := exec.Command(self, NsinitArg, nsinitHoldArg)
	cmd.Args[0] = "supervisor"
	cmd.Env = []string{}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: int(k.uid), HostID: int(base + shared.DefaultAgentUID), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: int(k.gid), HostID: int(base + shared.DefaultAgentGID), Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a user namespace for an idmapped mount: %w", err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	f, err := os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/user")
	if err != nil {
		return nil, fmt.Errorf("open the idmap user namespace: %w", err)
	}
	return f, nil
}

// idmapTree opens the host source of a --mount (no symlink on the way)
// as a detached tree, idmapped for the box whose host ids start at base.
// usernsFor returns (making it once) the namespace for a source owner.
// ok is false when this kernel or file system has no idmapped mounts:
// then the tree is returned as it is, for a read-only mount only.
func idmapTree(op fsOp, usernsFor func(idmapKey) (*os.File, error)) (tree int, idmapped bool, err error) {
	src, err := openHostSource(op.Source)
	if err != nil {
		return -1, false, err
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return -1, false, fmt.Errorf("mount source %s: %w", op.Source, os.NewSyscallError("fstat", err))
	}
	ns, err := usernsFor(idmapKey{st.Uid, st.Gid})
	if err != nil {
		return -1, false, err
	}
	open := func() (int, error) {
		fd, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
		if err != nil {
			return -1, fmt.Errorf("open %s for a bind mount: %w", op.Source, os.NewSyscallError("open_tree", err))
		}
		return fd, nil
	}
	fd, err := open()
	if err != nil {
		return -1, false, err
	}
	ierr := setTreeAttr(fd, op.ReadOnly, int(ns.Fd()))
	if ierr == nil {
		return fd, true, nil
	}
	unix.Close(fd)
	if !errors.Is(ierr, unix.EINVAL) && !errors.Is(ierr, unix.ENOSYS) && !errors.Is(ierr, unix.EPERM) && !errors.Is(ierr, unix.EOPNOTSUPP) {
		return -1, false, fmt.Errorf("idmap the mount of %s: %w", op.Source, ierr)
	}
	if !op.ReadOnly {
		return -1, false, fmt.Errorf("mount %s: this kernel or its file system has no idmapped mounts (%v), so the agent (its own host uid) could not write there; mount it read-only (:ro) or put it on a file system that supports them (ext4, xfs, btrfs on Linux 5.12+, tmpfs on 6.3+)", op.Source, ierr)
	}
	if fd, err = open(); err != nil {
		return -1, false, err
	}
	if err := setTreeAttr(fd, true, -1); err != nil {
		unix.Close(fd)
		return -1, false, err
	}
	return fd, false, nil
}

// openTrees opens, as the supervisor (host root), every host path the
// box's setup binds: the box's init stage runs in the box's user
// namespace and may not even look into a root-only folder. --mounts are
// idmapped for the box whose host ids start at base. Each step (and the
// rootfs) is marked with the descriptor number the init stage will find
// its tree under (firstFD, firstFD+1, ...); the files to pass are
// returned in that order.
func openTrees(cfg *nsinitConfig, self string, base int64, firstFD int, warn func(string, ...any)) (files []*os.File, err error) {
	users := map[idmapKey]*os.File{}
	defer func() {
		for _, f := range users {
			f.Close()
		}
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			files = nil
		}
	}()
	usernsFor := func(k idmapKey) (*os.File, error) {
		if f, ok := users[k]; ok {
			return f, nil
		}
		f, err := idmapUserns(self, k, base)
		if err != nil {
			return nil, err
		}
		users[k] = f
		return f, nil
	}
	add := func(fd int, name string) int {
		files = append(files, os.NewFile(uintptr(fd), "tree "+name))
		return firstFD + len(files) - 1
	}
	if cfg.Root != "" {
		fd, err := cloneTree(cfg.Root, true)
		if err != nil {
			return files, fmt.Errorf("root: %w", err)
		}
		cfg.RootFD = add(fd, cfg.Root)
	}
	for i := range cfg.Ops {
		op := &cfg.Ops[i]
		if op.Op != "bind" {
			continue
		}
		if !op.Idmap {
			fd, err := cloneTree(op.Source, op.ReadOnly)
			if err != nil {
				return files, err
			}
			op.TreeFD = add(fd, op.Source)
			continue
		}
		fd, idmapped, err := idmapTree(*op, usernsFor)
		if err != nil {
			return files, err
		}
		if !idmapped {
			warn("no idmapped mount here: the read-only mount's files show as nobody in the box", "source", op.Source)
		}
		op.TreeFD = add(fd, op.Source)
	}
	return files, nil
}
