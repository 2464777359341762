package ktest

// The test Kubernetes cluster (kernel-tests/k8s/cluster.sh) as the
// kubernetes runtime's kernel tests use it: its status (a test FAILS
// when it is not up), the admin kubeconfig, the watcher image imported
// into the cluster's containerd, kubectl for what a user would check.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest/ociimage"
)

// The cluster's fixed places (cluster.sh's contract).
const (
	K8sKubeconfig = "/var/lib/deathwatch-k8s/admin.kubeconfig"
	K8sKubectl    = "/var/cache/deathwatch-k8s/v1.37.2/bin/kubectl"
	K8sNamespace  = "default"
	K8sNode       = "localhost" // no scheduler: pods name their node
	K8sWatcherRef = "localhost/deathwatch/watcher"
)

// K8sClusterScript is cluster.sh: DEATHWATCH_K8S_CLUSTER_SH, else the
// repository's kernel-tests/k8s/cluster.sh.
func K8sClusterScript() string {
	if p := os.Getenv("DEATHWATCH_K8S_CLUSTER_SH"); p != "" {
		return p
	}
	return filepath.Join(RepoRoot(), "kernel-tests", "k8s", "cluster.sh")
}

// K8s is the running test cluster.
type K8s struct {
	Kubeconfig string
	Namespace  string
	Node       string
}

// RequireK8s fails the test unless `cluster.sh status` says the cluster
// is up and Ready.
func RequireK8s(t testing.TB) *K8s {
	t.Helper()
	RequireRoot(t)
	out, err := exec.Command("bash", K8sClusterScript(), "status").CombinedOutput()
	if err != nil {
		t.Fatalf("the test Kubernetes cluster is not up (%s status: %v): %s\nbring it up with `bash kernel-tests/k8s/cluster.sh up` (kernel-tests/provision.sh does)", K8sClusterScript(), err, strings.TrimSpace(string(out)))
	}
	return &K8s{Kubeconfig: K8sKubeconfig, Namespace: K8sNamespace, Node: K8sNode}
}

// Env is the supervisor's environment for the kubernetes runtime on
// this cluster.
func (k *K8s) Env() []string {
	return []string{"KUBECONFIG=" + k.Kubeconfig, "DEATHWATCH_K8S_NAMESPACE=" + k.Namespace,
		"DEATHWATCH_K8S_NODE=" + k.Node, "DEATHWATCH_K8S_PULL_NEVER=1"}
}

// Kubectl runs kubectl against the cluster and returns its stdout.
func (k *K8s) Kubectl(args ...string) (string, error) {
	cmd := exec.Command(K8sKubectl, append([]string{"--kubeconfig", k.Kubeconfig, "-n", k.Namespace}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), &kubectlError{args: args, err: err, stderr: stderr.String()}
	}
	return string(out), nil
}

type kubectlError struct {
	args   []string
	err    error
	stderr string
}

func (e *kubectlError) Error() string {
	return "kubectl " + strings.Join(e.args, " ") + ": " + e.err.Error() + ": " + strings.TrimSpace(e.stderr)
}

// Pods lists the names of the namespace's pods that match selector.
func (k *K8s) Pods(t testing.TB, selector string) []string {
	t.Helper()
	out, err := k.Kubectl("get", "pods", "-l", selector, "-o", "jsonpath={.items[*].metadata.name}")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(out)
}

// PodExists reports whether the pod is there (any phase).
func (k *K8s) PodExists(t testing.TB, name string) bool {
	t.Helper()
	out, err := k.Kubectl("get", "pod", name, "--ignore-not-found", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out) != ""
}

// WaitPodGone waits until the pod has left the API.
func (k *K8s) WaitPodGone(t testing.TB, name string, timeout time.Duration) bool {
	t.Helper()
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		if !k.PodExists(t, name) {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// DeletePod deletes a pod at once (cleanup of what a test made).
func (k *K8s) DeletePod(name string) {
	k.Kubectl("delete", "pod", name, "--grace-period=0", "--force", "--ignore-not-found", "--wait=false")
}

// CreatePod creates a pod from a manifest (JSON).
func (k *K8s) CreatePod(t testing.TB, pod map[string]any) {
	t.Helper()
	b, _ := json.Marshal(pod)
	cmd := exec.Command(K8sKubectl, "--kubeconfig", k.Kubeconfig, "-n", k.Namespace, "create", "-f", "-")
	cmd.Stdin = strings.NewReader(string(b))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl create: %v\n%s", err, out)
	}
}

var (
	k8sImageMu sync.Mutex
	k8sImages  = map[string]string{}
)

// WatcherImage is an image in the cluster with busybox and the watcher
// of Build at /usr/local/bin/watcher: the same file system and settings
// as the docker test image (DockerImage), written as an OCI archive by
// ociimage and imported with `cluster.sh import` (no Docker involved),
// named localhost/deathwatch/watcher:<hash of the content>. Imported once
// per watcher per test process.
func (k *K8s) WatcherImage(t testing.TB) string {
	t.Helper()
	w := Build(t).Watcher
	k8sImageMu.Lock()
	defer k8sImageMu.Unlock()
	if ref, ok := k8sImages[w]; ok {
		return ref
	}
	layer, sum, err := imageTar(w)
	if err != nil {
		t.Fatalf("watcher image: %v", err)
	}
	ref := K8sWatcherRef + ":" + sum[:16]
	tar := filepath.Join(t.TempDir(), "watcher-image.tar")
	f, err := os.Create(tar)
	if err != nil {
		t.Fatal(err)
	}
	err = ociimage.WriteLayer(f, ref, layer, imageConfig)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("watcher image %s: %v", ref, err)
	}
	if out, err := exec.Command("bash", K8sClusterScript(), "import", tar).CombinedOutput(); err != nil {
		t.Fatalf("cluster.sh import %s: %v\n%s", ref, err, out)
	}
	k8sImages[w] = ref
	return ref
}

// ContainerProcs is every host process of container c of the pod: those
// whose cgroup names its container id (the kubelet is on this host).
func (k *K8s) ContainerProcs(t testing.TB, pod, c string) []Proc {
	t.Helper()
	out, err := k.Kubectl("get", "pod", pod, "-o", `jsonpath={.status.containerStatuses[?(@.name=="`+c+`")].containerID}`)
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := strings.Cut(strings.TrimSpace(out), "://")
	if len(id) < 12 {
		t.Fatalf("pod %s: no id of container %s (%q)", pod, c, out)
	}
	var ps []Proc
	for _, pid := range PIDs() {
		cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		if err != nil || !strings.Contains(string(cg), id) {
			continue
		}
		if st, err := ReadStat(pid); err == nil {
			ps = append(ps, Proc{PID: pid, Start: st.Start})
		}
	}
	return ps
}
