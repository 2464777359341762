package shared

// The native runtime's box init stage: the supervisor works out what the
// box's file system is as plain data (BoxInit), and the watcher binary,
// started in the box's new namespaces, builds it and becomes PID 1
// (package deathwatch/shared/boxinit). The settings cross an inherited
// socket in the wire encoding of the frames (never JSON: the watcher
// does not link encoding/json), so both sides must agree on them byte
// for byte.

// FsOp is one step of the box's file-system setup, applied in order
// below the new root before pivot_root.
type FsOp struct {
	Op       string  // bind | mount | mkdir | file | symlink | readonly | rebind-ro
	Source   string  // bind: host path; mount: file system type; symlink: link text
	Target   string  // absolute path inside the box
	Flags    uintptr // mount: mount(2)'s flags; bind: MS_NOSUID and MS_NODEV make the tree nosuid, nodev
	Data     string
	ReadOnly bool // bind: recursive read-only
	Mode     uint32
	Mkdir    bool // bind: create the mount point (and parents) when missing
	Optional bool // mount: skip when the root has no such mount point
	// TreeFD is, for a bind step, a detached mount the supervisor
	// opened and passed to the init stage; 0: the init stage opens
	// Source itself.
	TreeFD int
	// Idmap marks a --mount: as root, the supervisor decides whether
	// its files are mapped to the agent through an idmapped mount.
	Idmap bool
}

// BoxInit is everything the box's init stage does.
type BoxInit struct {
	// Root is the host folder that becomes the box's / (recursive,
	// read-only); "" is the minimal root: a small tmpfs that Ops fill
	// with read-only binds of what commands need, read-only at the end.
	Root string
	// RootFD is Root as a detached tree the supervisor opened; 0: the
	// init stage opens Root itself.
	RootFD     int
	Ops        []FsOp
	Hostname   string
	LoopbackUp bool     // network none: bring lo up in the new network namespace
	Exec       string   // path inside the box of the watcher (exec'd by an unprivileged box's stage)
	Argv       []string // the watcher's argv
	Env        []string // its environment (never the agent's: that is in the spec frame)
	// Reexec (an unprivileged supervisor's box, whose uid map is written
	// after the clone): the stage execs itself once more as the mapped
	// root to hold capabilities, and at the end execs the watcher at
	// Exec. Otherwise the stage, exec'd as the mapped root, goes on as
	// the watcher in the same process.
	Reexec bool
	// CgroupTasks are the v1 "tasks" files of the box cgroup; the stage
	// moves its threads there (each thread itself: a thread moving
	// itself skips the global lock, and RCU wait, that moving a whole
	// process from outside takes, several ms a box).
	CgroupTasks []string
	// CgroupTaskFDs are those files, opened by the supervisor and
	// inherited: a box in a user namespace of its own may not open them.
	CgroupTaskFDs []int
	// CgroupNSDone: the stage was cloned in the box cgroup with a cgroup
	// namespace rooted there (a root supervisor on v1), so it joins
	// nothing and makes no namespace of its own.
	CgroupNSDone bool
	// CgroupMove is the cgroup.procs file of the v2 box cgroup's agent
	// folder, and CgroupMoveFD that file opened by the supervisor: the
	// stage, born in the box's cgroup, roots its cgroup namespace there
	// and then moves itself into the agent's folder, which the watcher
	// leaves once it has forked the agent (see native.WatcherGroup).
	// 0: no move.
	CgroupMove   string
	CgroupMoveFD int
}

// Marshal encodes c for the init stage.
func (c BoxInit) Marshal() []byte {
	var e enc
	e.str(c.Root)
	e.u64(uint64(c.RootFD))
	e.u64(uint64(len(c.Ops)))
	for _, op := range c.Ops {
		e.str(op.Op)
		e.str(op.Source)
		e.str(op.Target)
		e.u64(uint64(op.Flags))
		e.str(op.Data)
		e.boolean(op.ReadOnly)
		e.u64(uint64(op.Mode))
		e.boolean(op.Mkdir)
		e.boolean(op.Optional)
		e.u64(uint64(op.TreeFD))
		e.boolean(op.Idmap)
	}
	e.str(c.Hostname)
	e.boolean(c.LoopbackUp)
	e.str(c.Exec)
	e.strs(c.Argv)
	e.strs(c.Env)
	e.boolean(c.Reexec)
	e.strs(c.CgroupTasks)
	e.u64(uint64(len(c.CgroupTaskFDs)))
	for _, fd := range c.CgroupTaskFDs {
		e.u64(uint64(fd))
	}
	e.boolean(c.CgroupNSDone)
	e.str(c.CgroupMove)
	e.u64(uint64(c.CgroupMoveFD))
	return e.b
}

// ParseBoxInit decodes what Marshal encoded.
func ParseBoxInit(b []byte) (BoxInit, error) {
	d := dec{b: b, what: "box settings"}
	var c BoxInit
	c.Root = d.str("root")
	c.RootFD = d.fd("root_fd")
	n := d.u64("ops")
	// Every step takes at least eleven bytes, which bounds the count.
	if d.err == nil && n > uint64(len(d.b))/11 {
		d.fail("ops", "count "+utoa(n)+" exceeds the bytes left")
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		c.Ops = append(c.Ops, FsOp{
			Op: d.str("op"), Source: d.str("op.source"), Target: d.str("op.target"), Flags: uintptr(d.u64("op.flags")),
			Data: d.str("op.data"), ReadOnly: d.boolean("op.read_only"), Mode: d.u32("op.mode"), Mkdir: d.boolean("op.mkdir"),
			Optional: d.boolean("op.optional"), TreeFD: d.fd("op.tree_fd"), Idmap: d.boolean("op.idmap"),
		})
	}
	c.Hostname = d.str("hostname")
	c.LoopbackUp = d.boolean("loopback_up")
	c.Exec = d.str("exec")
	c.Argv = d.strs("argv")
	c.Env = d.strs("env")
	c.Reexec = d.boolean("reexec")
	c.CgroupTasks = d.strs("cgroup_tasks")
	n = d.u64("cgroup_task_fds")
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("cgroup_task_fds", "count "+utoa(n)+" exceeds the bytes left")
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		c.CgroupTaskFDs = append(c.CgroupTaskFDs, d.fd("cgroup_task_fds"))
	}
	c.CgroupNSDone = d.boolean("cgroup_ns_done")
	c.CgroupMove = d.str("cgroup_move")
	c.CgroupMoveFD = d.fd("cgroup_move_fd")
	return c, d.done()
}

// fd reads a descriptor number.
func (d *dec) fd(field string) int {
	v := d.u64(field)
	if v > 1<<20 {
		d.fail(field, "descriptor "+utoa(v)+" out of range")
		return 0
	}
	return int(v)
}
