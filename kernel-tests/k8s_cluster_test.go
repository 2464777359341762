package kerneltests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/kernel-tests/ktest/ociimage"
)

// The single-node Kubernetes cluster of kernel-tests/k8s/cluster.sh, as a
// user of it sees it: a whole control plane (a new namespace gets its
// service account and CA, pods are scheduled, a deleted namespace goes),
// Pod Security enforced, pods in user namespaces, a pod whose stdin ends
// when its attached client dies. The cluster is shared: these tests work
// in namespaces of their own and never stop or restart it.

const (
	k8sState = "/var/lib/deathwatch-k8s"
	k8sRun   = "/run/deathwatch-k8s"
)

func k8sClusterSh(args ...string) *exec.Cmd {
	return exec.Command("bash", append([]string{ktest.K8sClusterScript()}, args...)...)
}

// k8sTestNamespace is a namespace of the test's own (Pod Security
// baseline) on the cluster, which must be up.
func k8sTestNamespace(t *testing.T) *ktest.K8s {
	return ktest.RequireK8s(t).TestNamespace(t, ktest.PodSecurity{Enforce: "baseline"})
}

// k8sCtl runs kubectl as the cluster's admin in k's namespace and
// returns its stdout.
func k8sCtl(t *testing.T, k *ktest.K8s, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(ktest.K8sKubectl, append([]string{"--kubeconfig", k.Kubeconfig, "-n", k.Namespace, "--request-timeout=60s"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// k8sPodManifest is the pod name (placed by the scheduler, never
// restarted) of one container c from image, with the pod fields spec and
// the container fields extra (YAML, one field a line).
func k8sPodManifest(name, image string, spec []string, extra ...string) string {
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
`, name)
	for _, f := range spec {
		manifest += "  " + f + "\n"
	}
	manifest += fmt.Sprintf(`  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
`, image)
	for _, f := range extra {
		manifest += "    " + f + "\n"
	}
	return manifest
}

// k8sPod creates the pod of k8sPodManifest in k's namespace and deletes
// it when the test ends.
func k8sPod(t *testing.T, k *ktest.K8s, name, image string, spec []string, extra ...string) {
	t.Helper()
	k8sCtl(t, k, k8sPodManifest(name, image, spec, extra...), "apply", "-f", "-")
	t.Cleanup(func() { k.DeletePod(name) })
}

// k8sApply is `kubectl apply` of manifest in k's namespace: its error and
// output, for a test that expects a refusal.
func k8sApply(k *ktest.K8s, manifest string) (string, error) {
	apply := exec.Command(ktest.K8sKubectl, "--kubeconfig", k.Kubeconfig, "-n", k.Namespace, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(manifest)
	out, err := apply.CombinedOutput()
	return string(out), err
}

// k8sPhase is the pod's phase as the API shows it.
func k8sPhase(t *testing.T, k *ktest.K8s, name string) string {
	return k8sCtl(t, k, "", "get", "pod", name, "-o", "jsonpath={.status.phase}")
}

// k8sWaitFor polls cond every 100 ms until it holds or limit passes.
func k8sWaitFor(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// k8sClusterPids are the processes the cluster runs: the daemons cluster.sh
// records and the containerd shims (which name the cluster's socket).
func k8sClusterPids(t *testing.T) map[int]string {
	t.Helper()
	pids := map[int]string{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		var pid int
		fmt.Sscanf(filepath.Base(p), "%d", &pid)
		cmdline, err := os.ReadFile(p + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		exe, _ := os.Readlink(p + "/exe")
		all := string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		switch {
		case strings.HasPrefix(exe, "/var/cache/deathwatch-k8s/") && filepath.Base(args[0]) != "kubectl",
			strings.Contains(all, k8sRun+"/containerd.sock"),
			strings.Contains(all, k8sState+"/containerd.toml"),
			strings.Contains(all, k8sState+"/etcd"):
			pids[pid] = filepath.Base(args[0])
		}
	}
	return pids
}

func k8sRSSKiB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			var kib int
			fmt.Sscanf(strings.TrimPrefix(line, "VmRSS:"), "%d", &kib)
			return kib
		}
	}
	return 0
}

func TestK8sClusterUp(t *testing.T) {
	k := ktest.RequireK8s(t)
	ready := k8sCtl(t, k, "", "get", "node", "localhost", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	if ready != "True" {
		t.Fatalf("node localhost Ready = %q, want True", ready)
	}
	// Everything the cluster listens on is on 127.0.0.1.
	pids := k8sClusterPids(t)
	out, err := exec.Command("ss", "-H", "-ltnp").Output()
	if err != nil {
		t.Fatalf("ss -ltnp: %v", err)
	}
	listening := 0
	for _, line := range strings.Split(string(out), "\n") {
		for pid, name := range pids {
			if !strings.Contains(line, fmt.Sprintf("pid=%d,", pid)) {
				continue
			}
			listening++
			fields := strings.Fields(line)
			if len(fields) < 4 || !strings.HasPrefix(fields[3], "127.0.0.1:") {
				t.Errorf("%s (pid %d) listens beyond 127.0.0.1: %s", name, pid, line)
			}
		}
	}
	if listening < 6 {
		t.Errorf("found %d listening sockets of the cluster's processes %v, want at least etcd's, the apiserver's, the controller manager's, the scheduler's and the kubelet's", listening, pids)
	}
	total := 0
	for pid, name := range pids {
		kib := k8sRSSKiB(pid)
		total += kib
		t.Logf("RSS %-28s %6d KiB", fmt.Sprintf("%s (%d)", name, pid), kib)
	}
	t.Logf("cluster RSS in all: %d MiB in %d processes", total/1024, len(pids))
}

// k8sPodPid finds the host pid of the process named comm in the pod whose
// UID is uid (its cgroup path names the pod).
func k8sPodPid(uid, comm string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		c, err := os.ReadFile(p + "/comm")
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		cg, err := os.ReadFile(p + "/cgroup")
		if err != nil || !bytes.Contains(cg, []byte("pod"+uid)) {
			continue
		}
		var pid int
		fmt.Sscanf(filepath.Base(p), "%d", &pid)
		return pid
	}
	return 0
}

// k8sGone says whether pid no longer runs (no such process, or a zombie).
func k8sGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || strings.HasPrefix(s[i+1:], " Z") || strings.HasPrefix(s[i+1:], " X")
}

// k8sKillClient SIGKILLs client, a kubectl attached to the process pid
// (named comm) in a pod, fails the test unless that process is gone within
// ktest.Slack, logs how long it took and returns when the SIGKILL was sent.
func k8sKillClient(t *testing.T, client *exec.Cmd, pid int, comm, what string) time.Time {
	t.Helper()
	killed := time.Now()
	if err := client.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	client.Wait()
	// Polled every millisecond: the figure is the point here.
	for deadline := killed.Add(ktest.Slack); !k8sGone(pid) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if !k8sGone(pid) {
		t.Fatalf("%s (pid %d) still runs %v after its %s was SIGKILLed", comm, pid, ktest.Slack, what)
	}
	t.Logf("SIGKILL of %s -> the container's %s gone: %v", what, comm, time.Since(killed).Round(100*time.Microsecond))
	return killed
}

// TestK8sClusterStdinOnceEOF: a container with stdin and stdinOnce whose
// attached client is SIGKILLed sees its stdin end; `cat` then exits and the
// pod ends Succeeded. This is the channel the kubernetes runtime builds on.
func TestK8sClusterStdinOnceEOF(t *testing.T) {
	k := k8sTestNamespace(t)
	name := "dw-k8s-stdin"
	k8sPod(t, k, name, "localhost/deathwatch/busybox:1", nil, "command: [cat]", "stdin: true", "stdinOnce: true")
	phase := func() string { return k8sPhase(t, k, name) }
	start := time.Now()
	if !k8sWaitFor(120*time.Second, func() bool { return phase() == "Running" }) {
		t.Fatalf("pod %s not Running after 120 s (phase %q); read %s/log/kubelet.log", name, phase(), k8sState)
	}
	t.Logf("pod Running after %v", time.Since(start).Round(time.Millisecond))
	uid := k8sCtl(t, k, "", "get", "pod", name, "-o", "jsonpath={.metadata.uid}")
	pid := k8sPodPid(uid, "cat")
	if pid == 0 {
		t.Fatalf("no process cat in pod %s (uid %s) on the host", name, uid)
	}

	attach := exec.Command(ktest.K8sKubectl, "--kubeconfig", k.Kubeconfig, "-n", k.Namespace, "attach", "-i", name, "-c", "c")
	stdin, err := attach.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := attach.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	attach.Stderr = &stderr
	if err := attach.Start(); err != nil {
		t.Fatal(err)
	}
	// The attach is live once cat echoes a line written through it.
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ping" {
				lines <- sc.Text()
				break
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	fmt.Fprintln(stdin, "ping")
	select {
	case <-lines:
	case <-time.After(60 * time.Second):
		attach.Process.Kill()
		t.Fatalf("kubectl attach -i: no echo of ping in 60 s; stderr: %s", stderr.String())
	}
	if k8sGone(pid) {
		t.Fatalf("cat (pid %d) ended while the client was still attached", pid)
	}

	killed := k8sKillClient(t, attach, pid, "cat", "kubectl attach")
	if !k8sWaitFor(60*time.Second, func() bool { return phase() == "Succeeded" }) {
		t.Fatalf("pod %s phase %q 60 s after its process ended, want Succeeded", name, phase())
	}
	t.Logf("SIGKILL of kubectl attach -> the API shows the pod Succeeded: %v", time.Since(killed).Round(time.Millisecond))
}

// TestK8sClusterPodNetworkIsolated: a pod on the cluster's network
// (hostNetwork: false, the box pods' setting) has its own eth0 and reaches
// itself but not another pod: the macvlan "private" mode cluster.sh sets up.
func TestK8sClusterPodNetworkIsolated(t *testing.T) {
	k := k8sTestNamespace(t)
	a, b := "dw-k8s-net-a", "dw-k8s-net-b"
	for _, name := range []string{a, b} {
		k8sPod(t, k, name, "localhost/deathwatch/busybox:1", nil, `command: [sleep, "600"]`)
	}
	for _, name := range []string{a, b} {
		if !k8sWaitFor(120*time.Second, func() bool { return k8sPhase(t, k, name) == "Running" }) {
			t.Fatalf("pod %s not Running after 120 s", name)
		}
	}
	ipA := k8sCtl(t, k, "", "get", "pod", a, "-o", "jsonpath={.status.podIP}")
	ipB := k8sCtl(t, k, "", "get", "pod", b, "-o", "jsonpath={.status.podIP}")
	if ipA == "" || ipA == ipB {
		t.Fatalf("pod IPs %q and %q: want two distinct addresses", ipA, ipB)
	}
	ping := func(from, to string) error {
		return exec.Command(ktest.K8sKubectl, "--kubeconfig", k.Kubeconfig, "-n", k.Namespace, "exec", from, "--", "ping", "-c1", "-W2", to).Run()
	}
	if err := ping(b, ipB); err != nil {
		t.Fatalf("pod %s cannot ping its own address %s: %v", b, ipB, err)
	}
	if err := ping(b, ipA); err == nil {
		t.Fatalf("pod %s reached pod %s at %s: pods must not reach each other", b, a, ipA)
	}
}

// TestK8sClusterImportsOCIImage: an archive ociimage.Write makes from a
// rootfs folder is taken by `cluster.sh import` (ctr -n k8s.io images
// import) and runs as a pod with its entrypoint and environment.
func TestK8sClusterImportsOCIImage(t *testing.T) {
	k := k8sTestNamespace(t)
	busybox := ktest.RequireCmd(t, "busybox")
	dir := t.TempDir()
	root := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(root, "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprint(time.Now().UnixNano())
	ref := "localhost/deathwatch/test-import:" + tag
	archive := filepath.Join(dir, "image.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	err = ociimage.Write(f, ref, root, ociimage.Config{Entrypoint: []string{"/bin/sh", "-c", "echo imported-$MARK"}, Env: []string{"MARK=" + tag}})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if out, err := k8sClusterSh("import", archive).CombinedOutput(); err != nil {
		t.Fatalf("cluster.sh import: %v: %s", err, out)
	}
	t.Cleanup(func() {
		exec.Command(ktest.K8sCtr, "--address", k8sRun+"/containerd.sock", "-n", "k8s.io", "images", "rm", ref).Run()
	})
	name := "dw-k8s-import-" + tag[len(tag)-6:]
	k8sPod(t, k, name, ref, nil)
	phase := func() string { return k8sPhase(t, k, name) }
	if !k8sWaitFor(120*time.Second, func() bool { p := phase(); return p == "Succeeded" || p == "Failed" }) || phase() != "Succeeded" {
		t.Fatalf("pod of the imported image: phase %q, want Succeeded; %s", phase(), k8sCtl(t, k, "", "get", "pod", name, "-o", "jsonpath={.status}"))
	}
	if logs := strings.TrimSpace(k8sCtl(t, k, "", "logs", name)); logs != "imported-"+tag {
		t.Fatalf("pod of the imported image printed %q, want %q", logs, "imported-"+tag)
	}
}

// k8sWaitPhase waits up to 120 s for the pod to reach a phase in want and
// returns the phase it has then.
func k8sWaitPhase(t *testing.T, k *ktest.K8s, name string, want ...string) string {
	t.Helper()
	var phase string
	k8sWaitFor(120*time.Second, func() bool {
		phase = k8sPhase(t, k, name)
		for _, w := range want {
			if phase == w {
				return true
			}
		}
		return false
	})
	return phase
}

// TestK8sClusterControlPlane: what a whole control plane does that an API
// server and a kubelet alone do not: a new namespace gets its "default"
// service account and the cluster's CA as kube-root-ca.crt (controller
// manager), a pod that names no node runs (scheduler), and a deleted
// namespace with a running pod in it leaves the API (namespace
// controller).
func TestK8sClusterControlPlane(t *testing.T) {
	k := k8sTestNamespace(t) // waits for the default service account
	ca, err := os.ReadFile(ktest.K8sCA)
	if err != nil {
		t.Fatal(err)
	}
	var published string
	if !k8sWaitFor(60*time.Second, func() bool {
		published, _ = k.Kubectl("get", "configmap", "kube-root-ca.crt", "-o", `jsonpath={.data.ca\.crt}`)
		return published != ""
	}) {
		t.Fatalf("namespace %s has no configmap kube-root-ca.crt after 60 s", k.Namespace)
	}
	if strings.TrimSpace(published) != strings.TrimSpace(string(ca)) {
		t.Errorf("kube-root-ca.crt of %s is not the cluster's CA %s:\n%s", k.Namespace, ktest.K8sCA, published)
	}

	name := "dw-k8s-scheduled"
	k8sPod(t, k, name, "localhost/deathwatch/busybox:1", nil, `command: [sleep, "600"]`)
	if phase := k8sWaitPhase(t, k, name, "Running"); phase != "Running" {
		t.Fatalf("pod %s (no nodeName) not Running after 120 s: phase %q; %s", name, phase, k8sCtl(t, k, "", "get", "pod", name, "-o", "jsonpath={.status}"))
	}
	if node := k8sCtl(t, k, "", "get", "pod", name, "-o", "jsonpath={.spec.nodeName}"); node != "localhost" {
		t.Errorf("the scheduler placed pod %s on %q, want localhost", name, node)
	}

	start := time.Now()
	if _, err := k.Kubectl("delete", "namespace", k.Namespace, "--wait=false"); err != nil {
		t.Fatal(err)
	}
	gone := k8sWaitFor(3*time.Minute, func() bool {
		out, err := k.Kubectl("get", "namespace", k.Namespace, "--ignore-not-found", "-o", "name")
		return err == nil && strings.TrimSpace(out) == ""
	})
	if !gone {
		t.Fatalf("namespace %s (a running pod in it) still there 3 minutes after kubectl delete namespace", k.Namespace)
	}
	t.Logf("kubectl delete namespace with a running pod -> gone from the API: %v", time.Since(start).Round(time.Millisecond))
}

// TestK8sClusterUserNamespacedPod: a pod with hostUsers: false runs in a
// user namespace of its own: root inside, on the host a uid from the
// kubelet's range (above every other range on this machine), its mapping
// not the host's; two such pods get ranges that do not overlap.
func TestK8sClusterUserNamespacedPod(t *testing.T) {
	k := k8sTestNamespace(t)
	uids := map[string]int{}
	for _, name := range []string{"dw-k8s-userns-a", "dw-k8s-userns-b"} {
		k8sPod(t, k, name, "localhost/deathwatch/busybox:1", []string{"hostUsers: false"}, `command: [sleep, "600"]`)
	}
	for _, name := range []string{"dw-k8s-userns-a", "dw-k8s-userns-b"} {
		if phase := k8sWaitPhase(t, k, name, "Running"); phase != "Running" {
			t.Fatalf("pod %s (hostUsers: false) not Running after 120 s: phase %q; %s", name, phase, k8sCtl(t, k, "", "get", "pod", name, "-o", "jsonpath={.status}"))
		}
		inside := strings.TrimSpace(k8sCtl(t, k, "", "exec", name, "--", "sh", "-c", "id -u; cat /proc/self/uid_map"))
		t.Logf("pod %s: id -u and uid_map inside: %q", name, inside)
		lines := strings.Split(inside, "\n")
		if len(lines) != 2 || lines[0] != "0" {
			t.Fatalf("pod %s: id -u and uid_map inside = %q, want uid 0 and one mapping", name, inside)
		}
		var in, out, n int
		fmt.Sscanf(lines[1], "%d %d %d", &in, &out, &n)
		if in != 0 || out < ktest.K8sPodIDsFirst || out+n > ktest.K8sPodIDsFirst+ktest.K8sPodIDsCount || n != 65536 {
			t.Errorf("pod %s maps %d ids from %d to host %d, want 65536 from 0 within the kubelet's [%d, %d)", name, n, in, out,
				ktest.K8sPodIDsFirst, ktest.K8sPodIDsFirst+ktest.K8sPodIDsCount)
		}
		uid := k8sCtl(t, k, "", "get", "pod", name, "-o", "jsonpath={.metadata.uid}")
		pid := k8sPodPid(uid, "sleep")
		if pid == 0 {
			t.Fatalf("no process sleep of pod %s on the host", name)
		}
		v, err := ktest.StatusField(pid, "Uid")
		if err != nil {
			t.Fatal(err)
		}
		host, _ := strconv.Atoi(strings.Fields(v)[0])
		if host != out {
			t.Errorf("pod %s: its root is host uid %d, want %d (its mapping)", name, host, out)
		}
		uids[name] = host
	}
	if a, b := uids["dw-k8s-userns-a"], uids["dw-k8s-userns-b"]; a == b || (a < b && a+65536 > b) || (b < a && b+65536 > a) {
		t.Errorf("two pods in user namespaces share host ids: root of one is %d, of the other %d", a, b)
	}
}

// TestK8sClusterPodSecurityRestricted: a namespace labelled to enforce
// Pod Security restricted refuses a pod that runs as root with the
// default capabilities and admits one that meets the level.
func TestK8sClusterPodSecurityRestricted(t *testing.T) {
	k := ktest.RequireK8s(t).TestNamespace(t, ktest.PodSecurity{Enforce: "restricted"})
	const busybox, cmd = "localhost/deathwatch/busybox:1", `command: [/bin/sh, -c, "id -u"]`
	out, err := k8sApply(k, k8sPodManifest("dw-k8s-psa-root", busybox, nil, cmd))
	if err == nil || !strings.Contains(out, "restricted") {
		t.Errorf("a root pod in a namespace enforcing restricted: %v, want refused naming the level:\n%s", err, out)
	}
	t.Logf("refused: %s", strings.TrimSpace(out))
	k8sPod(t, k, "dw-k8s-psa-ok", busybox, nil, cmd, "securityContext: {runAsNonRoot: true, runAsUser: 65534, "+
		"allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, seccompProfile: {type: RuntimeDefault}}")
	if phase := k8sWaitPhase(t, k, "dw-k8s-psa-ok", "Succeeded", "Failed"); phase != "Succeeded" {
		t.Fatalf("the restricted pod: phase %q, want Succeeded", phase)
	}
	if logs := strings.TrimSpace(k8sCtl(t, k, "", "logs", "dw-k8s-psa-ok")); logs != "65534" {
		t.Errorf("the restricted pod printed uid %q, want 65534", logs)
	}
}

// TestK8sClusterRuntimeClass: a pod naming the RuntimeClass
// deathwatch-runc runs under containerd's handler dwrunc (its container's
// state is in that handler's runc root, not the default's); a pod naming
// a RuntimeClass the cluster lacks is refused.
func TestK8sClusterRuntimeClass(t *testing.T) {
	k := k8sTestNamespace(t)
	name := "dw-k8s-runtimeclass"
	k8sPod(t, k, name, "localhost/deathwatch/busybox:1", []string{"runtimeClassName: deathwatch-runc"}, `command: [sleep, "600"]`)
	if phase := k8sWaitPhase(t, k, name, "Running"); phase != "Running" {
		t.Fatalf("pod %s (runtimeClassName deathwatch-runc) not Running after 120 s: phase %q", name, phase)
	}
	id := k8sCtl(t, k, "", "get", "pod", name, "-o", `jsonpath={.status.containerStatuses[0].containerID}`)
	_, id, _ = strings.Cut(id, "://")
	if len(id) < 12 {
		t.Fatalf("pod %s: no container id (%q)", name, id)
	}
	if _, err := os.Stat(filepath.Join(k8sRun, "runc-dwrunc", "k8s.io", id)); err != nil {
		t.Errorf("container %s of pod %s is not in the dwrunc handler's runc root: %v", id, name, err)
	}
	if _, err := os.Stat(filepath.Join(k8sRun, "runc", "k8s.io", id)); err == nil {
		t.Errorf("container %s of pod %s is in the default handler's runc root", id, name)
	}

	out, err := k8sApply(k, k8sPodManifest("dw-k8s-no-such-class", "localhost/deathwatch/busybox:1", []string{"runtimeClassName: no-such-class"}))
	if err == nil || !strings.Contains(out, "no-such-class") {
		t.Errorf("a pod naming a RuntimeClass the cluster lacks: %v, want refused naming it:\n%s", err, out)
	}
}
