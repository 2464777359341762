package proc

import "golang.org/x/sys/unix"

// CgroupVersion says which cgroup version carries the controllers on
// this host (the layout at /sys/fs/cgroup): 2 for the unified tree, 1
// for v1 hierarchies (hybrid when a v2 tree is also mounted at
// /sys/fs/cgroup/unified), 0 when nothing is mounted there. It is what
// containerd's cgroups.Mode() says, in two statfs calls.
func CgroupVersion() (version int, hybrid bool) {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return 0, false
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return 2, false
	}
	if err := unix.Statfs("/sys/fs/cgroup/unified", &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return 1, true
	}
	return 1, false
}
