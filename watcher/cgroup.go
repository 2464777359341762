package watcher

import "strings"

// cgroupDir is the folder of the cgroup of controller named by the
// contents of /proc/self/cgroup: "N:controller[,other]:/path" on cgroup
// v1 (also on a hybrid host, whose "0::" line names a v2 tree without
// controllers; v1 is then true), else "0::/path" on v2. "" when neither
// is there.
func cgroupDir(procCgroup, controller string) (dir string, v1 bool) {
	for _, line := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) != 3:
		case hasController(parts[1], controller):
			return "/sys/fs/cgroup/" + controller + parts[2], true
		case parts[0] == "0" && parts[1] == "":
			dir = "/sys/fs/cgroup" + parts[2]
		}
	}
	return dir, false
}

func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}
