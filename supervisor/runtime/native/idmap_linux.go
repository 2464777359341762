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
	"deathwatch/shared/boxinit"
	"deathwatch/supervisor"
)

// Idmapped mounts (Linux 5.12+, file system permitting): a root
// supervisor's box runs in a user namespace of its own, so the host
// files of a --mount belong to nobody the box knows. Rather than chown
// them, the mount is idmapped: the owner of the mount's source folder
// (the controller, who filled it) shows in the box as the agent (the
// spec's uid:gid, see boxIDs), and what the agent creates lands on the
// host as that owner's. Files of other owners show as nobody (65534).
// A --image rootfs is idmapped the way the box's own namespace maps
// ids (host 0-65535 show as box 0-65535): an image unpacked by root
// shows its owners as the image meant them, read-only, nosuid, nodev.
//
// Without idmapped mounts (an older kernel, or a file system that does
// not support them, e.g. some network or FUSE file systems), a
// read-only --mount or rootfs is bound as it is, with a warning: its
// files show as nobody, readable where the host lets others read. A
// read-write --mount is refused, because the agent could not write to
// it.

// boxIDs are a root supervisor's box's host ids: its range starts at
// base (box id i is host id base+i) and its agent runs as uid:gid.
type boxIDs struct {
	base     int64
	uid, gid uint32
}

// agentIDs are the agent's uid and gid in box b (0:0 is unset: the
// default agent).
func agentIDs(b *supervisor.Box) (uint32, uint32) {
	if b.AgentUID == 0 && b.AgentGID == 0 {
		return shared.DefaultAgentUID, shared.DefaultAgentGID
	}
	return b.AgentUID, b.AgentGID
}

// idmapKey is one source owner; rootfs marks the rootfs's mapping.
type idmapKey struct {
	uid, gid uint32
	rootfs   bool
}

// maps are the user namespace's uid and gid maps for k: a source
// owner onto the agent's host ids, or the box's whole range.
func (ids boxIDs) maps(k idmapKey) (uids, gids []syscall.SysProcIDMap) {
	if k.rootfs {
		m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(ids.base), Size: IDRangeSize}}
		return m, m
	}
	return []syscall.SysProcIDMap{{ContainerID: int(k.uid), HostID: int(ids.base + int64(ids.uid)), Size: 1}},
		[]syscall.SysProcIDMap{{ContainerID: int(k.gid), HostID: int(ids.base + int64(ids.gid)), Size: 1}}
}

// idmapUserns starts a placeholder process in a new user namespace with
// the maps of k, opens that namespace and ends the placeholder.
func idmapUserns(self string, ids boxIDs, k idmapKey) (*os.File, error) {
	cmd := exec.Command(self, NsinitArg, nsinitHoldArg)
	cmd.Args[0] = "supervisor"
	cmd.Env = []string{}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	uids, gids := ids.maps(k)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: uids,
		GidMappings: gids,
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

// idmapTree opens the host source of a --mount (or the rootfs) with no
// symlink on the way, as a detached tree idmapped through the namespace
// usernsFor returns (making it once) for its key. idmapped is false
// when this kernel or file system has no idmapped mounts: then the tree
// is returned as it is, for a read-only mount only.
func idmapTree(source string, readOnly, rootfs bool, usernsFor func(idmapKey) (*os.File, error)) (tree int, idmapped bool, err error) {
	src, err := boxinit.OpenHostSource(source)
	if err != nil {
		return -1, false, err
	}
	defer unix.Close(src)
	key := idmapKey{rootfs: true}
	if !rootfs {
		var st unix.Stat_t
		if err := unix.Fstat(src, &st); err != nil {
			return -1, false, fmt.Errorf("mount source %s: %w", source, os.NewSyscallError("fstat", err))
		}
		key = idmapKey{uid: st.Uid, gid: st.Gid}
	}
	ns, err := usernsFor(key)
	if err != nil {
		return -1, false, err
	}
	open := func() (int, error) {
		fd, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
		if err != nil {
			return -1, fmt.Errorf("open %s for a bind mount: %w", source, os.NewSyscallError("open_tree", err))
		}
		if rootfs {
			// Owners as the image meant them, but no set-id program and
			// no device node of the image works in the box.
			attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
			if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
				unix.Close(fd)
				return -1, fmt.Errorf("make the rootfs %s nosuid and nodev: %w", source, os.NewSyscallError("mount_setattr", err))
			}
		}
		return fd, nil
	}
	fd, err := open()
	if err != nil {
		return -1, false, err
	}
	ierr := boxinit.SetTreeAttr(fd, readOnly, int(ns.Fd()))
	if ierr == nil {
		return fd, true, nil
	}
	unix.Close(fd)
	if !errors.Is(ierr, unix.EINVAL) && !errors.Is(ierr, unix.ENOSYS) && !errors.Is(ierr, unix.EPERM) && !errors.Is(ierr, unix.EOPNOTSUPP) {
		return -1, false, fmt.Errorf("idmap the mount of %s: %w", source, ierr)
	}
	if !readOnly {
		return -1, false, fmt.Errorf("mount %s: this kernel or its file system has no idmapped mounts (%v), so the agent (its own host uid) could not write there; mount it read-only (:ro) or put it on a file system that supports them (ext4, xfs, btrfs on Linux 5.12+, tmpfs on 6.3+)", source, ierr)
	}
	if fd, err = open(); err != nil {
		return -1, false, err
	}
	if err := boxinit.SetTreeAttr(fd, true, -1); err != nil {
		unix.Close(fd)
		return -1, false, err
	}
	return fd, false, nil
}

// openTrees opens, as the supervisor (host root), every host path the
// box's setup binds: the box's init stage runs in the box's user
// namespace and may not even look into a root-only folder. --mounts and
// the rootfs are idmapped for the box of ids. Each step (and the
// rootfs) is marked with the descriptor number the init stage will find
// its tree under (firstFD, firstFD+1, ...); the files to pass are
// returned in that order.
func openTrees(cfg *nsinitConfig, self string, ids boxIDs, firstFD int, warn func(string, ...any)) (files []*os.File, err error) {
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
		f, err := idmapUserns(self, ids, k)
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
		fd, idmapped, err := idmapTree(cfg.Root, true, true, usernsFor)
		if err != nil {
			return files, fmt.Errorf("root: %w", err)
		}
		if !idmapped {
			warn("no idmapped mount here: the rootfs's files show as nobody in the box", "rootfs", cfg.Root)
		}
		cfg.RootFD = add(fd, cfg.Root)
	}
	for i := range cfg.Ops {
		op := &cfg.Ops[i]
		if op.Op != "bind" {
			continue
		}
		if !op.Idmap {
			fd, err := boxinit.CloneTree(op.Source, op.ReadOnly)
			if err != nil {
				return files, err
			}
			op.TreeFD = add(fd, op.Source)
			continue
		}
		fd, idmapped, err := idmapTree(op.Source, op.ReadOnly, false, usernsFor)
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
