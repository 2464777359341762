// Package native makes boxes from Linux namespaces and a cgroup, the way
// bubblewrap does, with no daemon: the watcher binary, started in the
// new namespaces, builds the box's file system (its init stage, package
// deathwatch/shared/boxinit) and goes on as PID 1 with the control
// stream on an inherited socketpair.
//
// The box's walls (DESIGN.md):
//
//   - Identity. Every box has a user namespace. As root, box ids
//     0…65535 map onto a host range of the box's own (IDRangeBase + slot
//     × IDRangeSize, above every account and /etc/subuid range, held by a
//     lock file in DefaultIDRangeDir while the box exists): the agent
//     (--user, 1000 by default) is host id start+uid, the watcher (65533)
//     start+65533, and two live boxes never share a host id.
//     Unprivileged, the caller's own id is box root and the agent and
//     the watcher take a two-id slot of the caller's /etc/subuid and
//     /etc/subgid ranges (RootlessSlotIDs), so two boxes of one user
//     never share a host id either. A slot's lock file names the
//     supervisor and the box's init (pid and start time); one whose
//     both are gone is taken back by the next allocation. Mounts and a
//     --image rootfs are idmapped where the kernel can (idmap_linux.go).
//   - Reach. On the host root the box sees a minimal root: a small
//     read-only tmpfs with the host's /usr, /bin, /sbin, /lib* and a
//     filtered /etc (minimalEtc) bound read-only, its own /proc, /dev,
//     /tmp; nothing of /run, /var/run, /tmp, /var/tmp, /home, /root,
//     /srv, /mnt, /media, so no host socket by path. Abstract unix
//     sockets belong to the network namespace: --network host would
//     open the host's (and its loopback) to the agent, so it is refused
//     unless --allow-host-network (HostNetworkRefusal).
//   - Setup. The supervisor (as root) opens every host source itself
//     with openat2(RESOLVE_NO_SYMLINKS) and hands the init stage detached
//     trees (open_tree); the init stage resolves every target beneath the
//     new root with openat2(RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS) and
//     mounts by descriptor. A symlink on either side is refused.
//   - Limits. /tmp (TmpSize) and /dev/shm (ShmSize) have a size and an
//     inode count, their pages charged to the box's memory cgroup; a box
//     with a cgroup gets DefaultPidsLimit unless --pids-limit says
//     otherwise. Memory has no default limit (a controller that knows
//     its workload sets --memory); the agent is the OOM killer's first
//     choice and the watcher never is (AgentMemoryGroup). An
//     unprivileged supervisor on v2 puts its boxes below the delegated
//     cgroup it finds above its own (cgplace_linux.go).
//   - Trust. Records live in a folder that is the supervisor's own and
//     writable by nobody else (trusted.CheckDir); a journaled
//     init pid is acted on only with its start time, and a journaled
//     cgroup only when it is the box's own folder under the parent.
//
// Launch. The watcher binary, exec'd in the new namespaces (as root from
// the read-only detached tree of its bind mount), runs the init stage
// and then is the watcher, in the same process; an unprivileged box's
// stage execs twice more (as the mapped root once its uid map is
// written, then the watcher). Create starts the stage and sends it its
// settings at once, so that it builds the box's file system while exec
// journals the box as created.
//
// Kernel. Every feature a box needs has a stated minimum and a probe
// (kernelFeatures): without mount_setattr (5.12), openat2 (5.6),
// open_tree (5.2) or, on cgroup v2, clone3 CLONE_INTO_CGROUP (5.7) no
// box is made (doctor: not usable; --runtime auto passes native by);
// without pidfds, Landlock or cgroup.kill boxes run and doctor says
// what changes.
//
// It is Linux-only: on other systems the package registers a descriptor
// that is never installed, so `--runtime native` and doctor say so, and
// --runtime auto never picks it.
package native
