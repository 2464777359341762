package docker

import (
	"deathwatch/supervisor/exitcode"
	"strings"
)

// daemonLimits is what docker's /info says the daemon can enforce: a
// daemon without cgroups for its boxes (a rootless one on cgroup v1, or
// on v2 without the controllers delegated to its user) says false and
// would run the box without the limit.
type daemonLimits struct {
	MemoryLimit  bool
	PidsLimit    bool
	CgroupDriver string // cgroupfs | systemd | none
}

// enforces reports whether the daemon enforces both limits.
func (l daemonLimits) enforces() bool {
	return l.MemoryLimit && l.PidsLimit && l.CgroupDriver != "none"
}

// refuse says which asked-for limit the daemon would not enforce.
func (l daemonLimits) refuse(kind string, memory, pids int64) error {
	var no []string
	if memory > 0 && (!l.MemoryLimit || l.CgroupDriver == "none") {
		no = append(no, "--memory")
	}
	if pids > 0 && (!l.PidsLimit || l.CgroupDriver == "none") {
		no = append(no, "--pids-limit")
	}
	if len(no) == 0 {
		return nil
	}
	return exitcode.Refused("the %s daemon would not enforce %s (its /info: MemoryLimit %t, PidsLimit %t, cgroup driver %q); give it cgroups (cgroup v2 with the memory and pids controllers delegated to the daemon's user), use a rootful engine with --allow-rootful, or drop the limit",
		kind, strings.Join(no, " and "), l.MemoryLimit, l.PidsLimit, l.CgroupDriver)
}

// limitWarning refuses a box the engine created with a warning that it
// dropped a limit the create asked for (memory, pids: the request's,
// defaults included; "... Limitation discarded.", "PIDs limit
// discarded."): the limit would not hold.
func limitWarning(kind string, memory, pids int64, warnings []string) error {
	if memory <= 0 && pids <= 0 {
		return nil
	}
	for _, w := range warnings {
		lw := strings.ToLower(w)
		if strings.Contains(lw, "limit") && (strings.Contains(lw, "discarded") || strings.Contains(lw, "not support")) {
			return exitcode.Refused("%s created the box without a limit it was asked for (%q); give the daemon cgroups for its boxes, use a rootful engine with --allow-rootful, or drop --memory/--pids-limit", kind, w)
		}
	}
	return nil
}
