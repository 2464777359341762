package kerneltests

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// boxesOnHost lists what of a box can outlive its supervisor on this
// machine, each as "where: name": the native runtime's records (root's
// and the unprivileged test user's) and cgroup folders, one-step podman
// runs' cidfile folders, and the containers that carry deathwatch's
// managed label in Docker, rootful Podman and the test user's Podman,
// and the test cluster's pods that carry it. An engine that is not there
// or does not answer has none to list. A process in a lane of make test
// (ktest.Lane) lists only what its lane's tests make: the lanes run side
// by side, and one lane's live boxes are not another's leaks.
func boxesOnHost() map[string]bool {
	out := map[string]bool{}
	add := func(where string, names []string) {
		for _, n := range names {
			out[where+": "+n] = true
		}
	}
	if ktest.Lane() == "" || ktest.Lane() == ktest.LaneKubernetes {
		pods := exec.Command(ktest.K8sKubectl, "--kubeconfig", ktest.K8sKubeconfig, "get", "pods", "--all-namespaces",
			"-l", shared.LabelManaged+"=true", "-o", `jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{" "}{end}`)
		if b, err := pods.Output(); err == nil {
			add("kubernetes pod", strings.Fields(string(b)))
		}
	}
	if ktest.Lane() == ktest.LaneKubernetes {
		return out
	}
	records := func(dir string) []string {
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for i, f := range files {
			files[i] = strings.TrimSuffix(filepath.Base(f), ".json")
		}
		return files
	}
	add("native record", records("/run/deathwatch/native"))
	if rd, err := ktest.RuntimeDir(ktest.RootlessUser); err == nil {
		add("native record of "+ktest.RootlessUser, records(filepath.Join(rd, "deathwatch", "native")))
	}
	for where, pattern := range map[string]string{
		"cgroup":    "/sys/fs/cgroup/*/deathwatch/dw-*",
		"cgroup v2": "/sys/fs/cgroup/deathwatch/dw-*",
		// A one-step podman run's cidfile folder (root's and the user's).
		"podman run folder": filepath.Join(os.TempDir(), "dw-run-dw-*"),
	} {
		dirs, _ := filepath.Glob(pattern)
		add(where, dirs)
	}
	ps := []string{"ps", "--all", "--filter", "label=" + shared.LabelManaged + "=true", "--format", "{{.Names}}"}
	for where, cmd := range map[string]*exec.Cmd{
		"docker":                                exec.Command("docker", ps...),
		"podman":                                exec.Command("podman", ps...),
		"podman of " + ktest.RootlessUser:       ktest.AsUser(ktest.RootlessUser, "podman", ps...),
		"docker of " + ktest.DockerRootlessUser: ktest.AsUser(ktest.DockerRootlessUser, "docker", ps...),
	} {
		if b, err := cmd.Output(); err == nil {
			add(where, strings.Fields(string(b)))
		}
	}
	return out
}

// leftBehind is what boxesOnHost lists now and did not in before,
// sorted.
func leftBehind(before map[string]bool) []string {
	var left []string
	for b := range boxesOnHost() {
		if !before[b] {
			left = append(left, b)
		}
	}
	sort.Strings(left)
	return left
}
