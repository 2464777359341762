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
	"deathwatch/supervisor/exitcode"
)

// Idmapped mounts (Linux 5.12+, file system permitting): the host files
// of a --mount belong to nobody a root supervisor's box knows. A --mount
// of a folder the --mount-owner account owns is idmapped: that account
// shows in the box as the agent (boxIDs), and what the agent creates
// lands on the host as that account's. Any other --mount is bound as it
// is, read-only, its files shown as nobody; a read-write one is refused
// (mountMapping). No other host id, and never uid or gid 0, maps onto
// the agent: it could leave a set-uid root program on the host or read
// root's 0600 files. A --image rootfs is idmapped as the box maps ids
// (host 0-65535 show as box 0-65535). Every mount is nosuid and nodev.
// Without idmapped mounts a read-only --mount or rootfs is bound as it
// is, with a warning, and a read-write --mount is refused.

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
	cmd.Env = []string{nsinitMarker}
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

// mountMapping decides how a root supervisor's box sees a --mount
// whose folder (source) host uid:gid owns: idmapped onto the agent when
// the operator named exactly that account (named, --mount-owner), else
// bound as it is, read-only. A read-write mount of any other folder is
// refused: the agent could write there only as root or as a host
// account nobody named.
func mountMapping(source string, uid, gid uint32, named *supervisor.HostIDs, readOnly bool) (idmap bool, err error) {
	if named != nil && named.UID != 0 && named.GID != 0 && uid == named.UID && gid == named.GID {
		return true, nil
	}
	if readOnly {
		return false, nil
	}
	who := fmt.Sprintf("host %d:%d", uid, gid)
	switch {
	case uid == 0 || gid == 0:
		who = "root's (" + who + ")"
	case named != nil:
		who = who + "'s, not the --mount-owner " + fmt.Sprintf("%d:%d", named.UID, named.GID)
	default:
		who = who + "'s, and no --mount-owner names that account"
	}
	return false, exitcode.Refused("--mount %s: the folder is %s; the agent never acts as root or as a host account nobody named, so it is refused read-write: mount it read-only (:ro; its files show as nobody, readable where anyone may read), or chown it to an account that is not root and name it with --mount-owner UID:GID", source, who)
}

// checkMountSources opens every --mount source by descriptor with no
// symlink on the way (refused, 243, as the setup would refuse it) and,
// for a root supervisor's box, applies mountMapping, before anything is
// created.
func checkMountSources(b *supervisor.Box, root bool) error {
	for _, m := range b.Mounts {
		src, err := boxinit.OpenHostSource(m.Source)
		if err != nil {
			return exitcode.Refused("%w", err)
		}
		var st unix.Stat_t
		err = unix.Fstat(src, &st)
		unix.Close(src)
		if err != nil {
			return exitcode.Setup("mount source %s: %w", m.Source, os.NewSyscallError("fstat", err))
		}
		if !root {
			continue
		}
		if _, err := mountMapping(m.Source, st.Uid, st.Gid, b.MountOwner, m.ReadOnly); err != nil {
			return err
		}
	}
	return nil
}

// bindAttr are the attributes of a --mount's (or the rootfs's) tree.
func bindAttr(readOnly bool) uint64 {
	return boxinit.TreeAttr(readOnly, unix.MS_NOSUID|unix.MS_NODEV)
}

// idmapTree opens the host source of a --mount (or the rootfs) with no
// symlink on the way, as a detached tree, nosuid and nodev: idmapped
// through the namespace usernsFor returns (making it once) for its key
// when mountMapping (or rootfs) says so, else bound as it is,
// read-only. noIdmap is true when the tree was meant to be idmapped but
// this kernel or file system has no idmapped mounts (then a read-only
// mount only, bound as it is).
func idmapTree(source string, readOnly, rootfs bool, named *supervisor.HostIDs, usernsFor func(idmapKey) (*os.File, error)) (tree int, noIdmap bool, err error) {
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
		// Decided again on what was opened: the folder's owner may
		// have changed since Create.
		idmap, err := mountMapping(source, st.Uid, st.Gid, named, readOnly)
		if err != nil {
			return -1, false, err
		}
		if !idmap {
			fd, err := cloneTreeAt(src, source, bindAttr(true), -1)
			return fd, false, err
		}
		key = idmapKey{uid: st.Uid, gid: st.Gid}
	}
	ns, err := usernsFor(key)
	if err != nil {
		return -1, false, err
	}
	fd, ierr := cloneTreeAt(src, source, bindAttr(readOnly), int(ns.Fd()))
	if ierr == nil {
		return fd, false, nil
	}
	if !errors.Is(ierr, unix.EINVAL) && !errors.Is(ierr, unix.ENOSYS) && !errors.Is(ierr, unix.EPERM) && !errors.Is(ierr, unix.EOPNOTSUPP) {
		return -1, false, fmt.Errorf("idmap the mount of %s: %w", source, ierr)
	}
	if !readOnly {
		return -1, false, fmt.Errorf("mount %s: this kernel or its file system has no idmapped mounts (%s), so the agent (its own host uid) could not write there; mount it read-only (:ro) or put it on a file system that supports them (ext4, xfs, btrfs on Linux 5.12+, tmpfs on 6.3+)", source, ierr.Error())
	}
	fd, err = cloneTreeAt(src, source, bindAttr(true), -1)
	return fd, true, err
}

// cloneTreeAt is a detached copy of the open source's mounts with the
// attributes set, idmapped through userns when that is not -1 (the
// error of that step is SetTreeAttr's, unwrapped).
func cloneTreeAt(src int, source string, set uint64, userns int) (int, error) {
	fd, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("open %s for a bind mount: %w", source, os.NewSyscallError("open_tree", err))
	}
	if err := boxinit.SetTreeAttr(fd, set, userns); err != nil {
		unix.Close(fd)
		if userns >= 0 {
			return -1, err
		}
		return -1, fmt.Errorf("open %s for a bind mount: %w", source, err)
	}
	return fd, nil
}

// openTrees opens, as the supervisor (host root), every host path the
// box's setup binds: the box's init stage runs in the box's user
// namespace and may not even look into a root-only folder. --mounts and
// the rootfs are idmapped for the box of ids. Each step (and the
// rootfs) is marked with the descriptor number the init stage will find
// its tree under (firstFD, firstFD+1, ...); the files to pass are
// returned in that order.
func openTrees(cfg *nsinitConfig, self string, ids boxIDs, named *supervisor.HostIDs, firstFD int, warn func(string, ...any)) (files []*os.File, err error) {
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
		fd, noIdmap, err := idmapTree(cfg.Root, true, true, nil, usernsFor)
		if err != nil {
			return files, fmt.Errorf("root: %w", err)
		}
		if noIdmap {
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
			fd, err := boxinit.CloneTree(op.Source, boxinit.TreeAttr(op.ReadOnly, op.Flags))
			if err != nil {
				return files, err
			}
			op.TreeFD = add(fd, op.Source)
			continue
		}
		fd, noIdmap, err := idmapTree(op.Source, op.ReadOnly, false, named, usernsFor)
		if err != nil {
			return files, err
		}
		if noIdmap {
			warn("no idmapped mount here: the read-only mount's files show as nobody in the box", "source", op.Source)
		}
		op.TreeFD = add(fd, op.Source)
	}
	return files, nil
}
