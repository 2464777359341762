package kubernetes

import (
	"os"
	"strconv"
	"strings"
)

// localPID is the host pid of the process that is PID 1 of container
// id's PID namespace (its cgroup names the id), or 0.
func localPID(id string) int {
	if len(id) < 12 {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil || !strings.Contains(string(cg), id) {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if f, ok := strings.CutPrefix(line, "NSpid:"); ok {
				ns := strings.Fields(f)
				if len(ns) > 1 && ns[len(ns)-1] == "1" {
					return pid
				}
			}
		}
	}
	return 0
}
