package hostcheck

import "deathwatch/supervisor/proc"

// cgroupMode names the host's cgroup layout.
func cgroupMode() string {
	switch v, hybrid := proc.CgroupVersion(); {
	case v == 2:
		return "v2 (unified)"
	case v == 1 && hybrid:
		return "v1 (hybrid: v1 controllers, v2 mounted at /sys/fs/cgroup/unified)"
	case v == 1:
		return "v1 (legacy)"
	}
	return "none mounted at /sys/fs/cgroup"
}
