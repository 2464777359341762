package ktest

// The test Kubernetes cluster (kernel-tests/k8s/cluster.sh) as the
// kubernetes runtime's kernel tests use it: its status (a test waits
// while provision.sh brings it up and FAILS when it is not up), a
// namespace of the test's own, the admin kubeconfig, the watcher image
// imported into the cluster's containerd, kubectl for what a user would
// check. The cluster is shared by every test and every test run on the
// machine: no test stops, restarts or rebuilds it.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	K8sKubectl    = "/var/cache/deathwatch-k8s/bin/kubectl"
	K8sCtr        = "/var/cache/deathwatch-k8s/bin/ctr" // the cluster's containerd's own
	K8sCA         = "/var/lib/deathwatch-k8s/pki/ca.crt"
	// K8sPodIDsFirst and K8sPodIDsCount are the host ids of the pods in
	// user namespaces (hostUsers: false): the kubelet's own range.
	K8sPodIDsFirst = 1<<31 + 1<<29
	K8sPodIDsCount = 110 * 65536
	K8sNamespace   = "default"
	K8sWatcherRef  = "localhost/deathwatch/watcher"
	// K8sBringUpCeiling bounds the wait for provision.sh's background
	// build and start of the cluster: a fresh machine's build, on 2
	// loaded cores.
	K8sBringUpCeiling = 80 * time.Minute
	// k8sNamespaceGoneCeiling bounds the wait for a test's namespace to
	// leave the API (the namespace controller deletes what is in it).
	k8sNamespaceGoneCeiling = 3 * time.Minute
)

// LaneEnv names the lane of make test a test process runs in ("" when
// run by hand: every test). Lanes run side by side, each its own go test
// process; TestMain's leak check and RequireK8s read it.
const LaneEnv = "DEATHWATCH_TEST_LANE"

// The lanes that set LaneEnv.
const (
	LaneMain       = "main"       // every kernel test but the Kubernetes ones
	LaneKubernetes = "kubernetes" // the Kubernetes tests (K8sTests)
)

// K8sTests matches the names of the tests that use the cluster: make
// test runs them in the kubernetes lane and the others without them.
const K8sTests = `^Test(K8s|Kubernetes|EscapeKubernetes)`

// Lane is this process's lane (LaneEnv).
func Lane() string { return os.Getenv(LaneEnv) }

// K8sClusterScript is cluster.sh: DEATHWATCH_K8S_CLUSTER_SH, else the
// repository's kernel-tests/k8s/cluster.sh.
func K8sClusterScript() string {
	if p := os.Getenv("DEATHWATCH_K8S_CLUSTER_SH"); p != "" {
		return p
	}
	return filepath.Join(RepoRoot(), "kernel-tests", "k8s", "cluster.sh")
}

// K8s is the running test cluster, seen from one namespace.
type K8s struct {
	Kubeconfig string
	Namespace  string
	Node       string // "" lets the scheduler place pods
}

var k8sUp struct {
	sync.Mutex
	ok bool
}

// RequireK8s fails the test unless the cluster is up and Ready: it
// waits (up to K8sBringUpCeiling) while provision.sh's background
// bring-up runs (`cluster.sh wait`), and fails at once when that failed.
// The K8s it returns is in the namespace "default"; tests use a
// namespace of their own (TestNamespace).
func RequireK8s(t testing.TB) *K8s {
	t.Helper()
	RequireRoot(t)
	if Lane() != "" && Lane() != LaneKubernetes {
		t.Fatalf("this test uses the Kubernetes cluster but runs in the %q lane: name it to match %s, so that make test runs it in the kubernetes lane", Lane(), K8sTests)
	}
	k8sUp.Lock()
	defer k8sUp.Unlock()
	if !k8sUp.ok {
		cmd := exec.Command("bash", K8sClusterScript(), "wait", strconv.Itoa(int(K8sBringUpCeiling/time.Second)))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the test Kubernetes cluster is not up (%s wait: %v):\n%s\nbring it up with `bash kernel-tests/k8s/cluster.sh build && bash kernel-tests/k8s/cluster.sh up` (kernel-tests/provision.sh does)", K8sClusterScript(), err, strings.TrimSpace(string(out)))
		}
		k8sUp.ok = true
	}
	return &K8s{Kubeconfig: K8sKubeconfig, Namespace: K8sNamespace}
}

// PodSecurity is a namespace's Pod Security admission levels
// ("privileged", "baseline" or "restricted"; "" sets no label).
type PodSecurity struct {
	Enforce, Warn, Audit string
}

// labels are the namespace labels of ps.
func (ps PodSecurity) labels() map[string]string {
	l := map[string]string{}
	for mode, level := range map[string]string{"enforce": ps.Enforce, "warn": ps.Warn, "audit": ps.Audit} {
		if level != "" {
			l["pod-security.kubernetes.io/"+mode] = level
		}
	}
	return l
}

// K8sTestLabel marks the namespaces TestNamespace makes.
const K8sTestLabel = "deathwatch.test/namespace"

var k8sNameRe = regexp.MustCompile(`[^a-z0-9]+`)

// k8sNamespaceName is a namespace name for a test: "dwt-", the test's
// name cut to fit, a suffix that differs between calls and runs.
func k8sNamespaceName(test string, n int64) string {
	base := strings.Trim(k8sNameRe.ReplaceAllString(strings.ToLower(strings.TrimPrefix(test, "Test")), "-"), "-")
	suffix := strconv.FormatInt(n, 36)
	if max := 63 - len("dwt-") - 1 - len(suffix); len(base) > max {
		base = strings.TrimRight(base[:max], "-")
	}
	return "dwt-" + base + "-" + suffix
}

// TestNamespace is a namespace of the test's own with the Pod Security
// levels ps, ready for pods (its "default" service account made by the
// controller manager), and deleted when the test ends: the test FAILS
// when it has not left the API after k8sNamespaceGoneCeiling. The K8s it
// returns works in it.
func (k *K8s) TestNamespace(t testing.TB, ps PodSecurity) *K8s {
	t.Helper()
	name := k8sNamespaceName(t.Name(), time.Now().UnixNano())
	labels := ps.labels()
	labels[K8sTestLabel] = "true"
	ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name, "labels": labels}}
	k.create(t, ns)
	t.Cleanup(func() {
		start := time.Now()
		if _, err := k.Kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false"); err != nil {
			t.Errorf("delete the test's namespace: %v", err)
			return
		}
		gone := WaitFor(k8sNamespaceGoneCeiling, func() bool {
			out, err := k.Kubectl("get", "namespace", name, "--ignore-not-found", "-o", "name")
			return err == nil && strings.TrimSpace(out) == ""
		})
		if !gone {
			out, _ := k.Kubectl("get", "namespace", name, "-o", "jsonpath={.status}")
			t.Errorf("namespace %s still there %v after its deletion: %s", name, k8sNamespaceGoneCeiling, out)
			return
		}
		t.Logf("namespace %s deleted in %v", name, time.Since(start).Round(time.Millisecond))
	})
	in := &K8s{Kubeconfig: k.Kubeconfig, Namespace: name, Node: k.Node}
	if !WaitFor(2*time.Minute, func() bool {
		out, err := in.Kubectl("get", "serviceaccount", "default", "--ignore-not-found", "-o", "name")
		return err == nil && strings.TrimSpace(out) != ""
	}) {
		t.Fatalf("namespace %s has no default service account after 2 minutes (is the controller manager up? read /var/lib/deathwatch-k8s/log/kube-controller-manager.log)", name)
	}
	return in
}

// create creates obj (a manifest) with kubectl, in k's namespace when
// obj is namespaced and names none.
func (k *K8s) create(t testing.TB, obj map[string]any) {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(K8sKubectl, "--kubeconfig", k.Kubeconfig, "-n", k.Namespace, "create", "-f", "-")
	cmd.Stdin = strings.NewReader(string(b))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl create %s: %v\n%s", b, err, out)
	}
}

// Env is the supervisor's environment for the kubernetes runtime on
// this cluster, in k's namespace.
func (k *K8s) Env() []string {
	env := []string{"KUBECONFIG=" + k.Kubeconfig, "DEATHWATCH_K8S_NAMESPACE=" + k.Namespace, "DEATHWATCH_K8S_PULL_NEVER=1"}
	if k.Node != "" {
		env = append(env, "DEATHWATCH_K8S_NODE="+k.Node)
	}
	return env
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

// KubectlStdin runs kubectl against the cluster with stdin as its input.
func (k *K8s) KubectlStdin(stdin []byte, args ...string) error {
	cmd := exec.Command(K8sKubectl, append([]string{"--kubeconfig", k.Kubeconfig, "-n", k.Namespace}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return &kubectlError{args: args, err: err, stderr: stderr.String()}
	}
	return nil
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

// CreatePod creates a pod in k's namespace from a manifest.
func (k *K8s) CreatePod(t testing.TB, pod map[string]any) {
	t.Helper()
	k.create(t, pod)
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
