package hostcheck

import "github.com/containerd/cgroups/v3"

// cgroupMode names the host's cgroup layout.
func cgroupMode() string {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return "v2 (unified)"
	case cgroups.Hybrid:
		return "v1 (hybrid: v1 controllers, v2 mounted at /sys/fs/cgroup/unified)"
	case cgroups.Legacy:
		return "v1 (legacy)"
	}
	return "none mounted at /sys/fs/cgroup"
}
