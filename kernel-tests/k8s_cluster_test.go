package kerneltests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/kernel-tests/ktest/ociimage"
)

// The single-node Kubernetes cluster of kernel-tests/k8s/cluster.sh, as a
// user of it sees it: up, running a pod whose stdin ends when its attached
// client dies, and gone without a trace after `down`.

const (
	k8sAdmin   = "/var/lib/deathwatch-k8s/admin.kubeconfig"
	k8sKubectl = "/var/cache/deathwatch-k8s/v1.37.2/bin/kubectl"
	k8sState   = "/var/lib/deathwatch-k8s"
	k8sRun     = "/run/deathwatch-k8s"
)

func k8sClusterSh(args ...string) *exec.Cmd {
	return exec.Command("bash", append([]string{filepath.Join(ktest.RepoRoot(), "kernel-tests", "k8s", "cluster.sh")}, args...)...)
}

// k8sRequireCluster fails the test unless `cluster.sh status` says the
// cluster is up.
func k8sRequireCluster(t *testing.T) {
	t.Helper()
	ktest.RequireRoot(t)
	out, err := k8sClusterSh("status").CombinedOutput()
	if err != nil {
		t.Fatalf("the Kubernetes test cluster is not up: %s(run kernel-tests/k8s/cluster.sh up, or kernel-tests/provision.sh)", out)
	}
}

// k8sCtl runs kubectl as the cluster's admin and returns its stdout.
func k8sCtl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(k8sKubectl, append([]string{"--kubeconfig", k8sAdmin, "--request-timeout=60s"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// k8sPod creates the pod name in the default namespace, on the node, from
// image with the container fields extra (YAML, one field a line), and
// deletes it when the test ends.
func k8sPod(t *testing.T, name, image string, extra ...string) {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  nodeName: localhost
  restartPolicy: Never
  automountServiceAccountToken: false
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
`, name, image)
	for _, f := range extra {
		manifest += "    " + f + "\n"
	}
	k8sCtl(t, manifest, "apply", "-f", "-")
	t.Cleanup(func() {
		exec.Command(k8sKubectl, "--kubeconfig", k8sAdmin, "delete", "pod", name, "--grace-period=0", "--force").Run()
	})
}

// k8sPhase is the pod's phase as the API shows it.
func k8sPhase(t *testing.T, name string) string {
	return k8sCtl(t, "", "get", "pod", name, "-o", "jsonpath={.status.phase}")
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
		case strings.HasPrefix(exe, "/var/cache/deathwatch-k8s/") && !strings.HasSuffix(exe, "/kubectl"),
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
	k8sRequireCluster(t)
	ready := k8sCtl(t, "", "get", "node", "localhost", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
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
	if listening < 4 {
		t.Errorf("found %d listening sockets of the cluster's processes %v, want at least etcd, apiserver and kubelet's", listening, pids)
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

// TestK8sClusterStdinOnceEOF: a container with stdin and stdinOnce whose
// attached client is SIGKILLed sees its stdin end; `cat` then exits and the
// pod ends Succeeded. This is the channel the kubernetes runtime builds on.
func TestK8sClusterStdinOnceEOF(t *testing.T) {
	k8sRequireCluster(t)
	name := fmt.Sprintf("dw-k8s-stdin-%d", time.Now().UnixNano()%1000000)
	k8sPod(t, name, "localhost/deathwatch/busybox:1", "command: [cat]", "stdin: true", "stdinOnce: true")
	phase := func() string { return k8sPhase(t, name) }
	start := time.Now()
	if !k8sWaitFor(120*time.Second, func() bool { return phase() == "Running" }) {
		t.Fatalf("pod %s not Running after 120 s (phase %q); read %s/log/kubelet.log", name, phase(), k8sState)
	}
	t.Logf("pod Running after %v", time.Since(start).Round(time.Millisecond))
	uid := k8sCtl(t, "", "get", "pod", name, "-o", "jsonpath={.metadata.uid}")
	pid := k8sPodPid(uid, "cat")
	if pid == 0 {
		t.Fatalf("no process cat in pod %s (uid %s) on the host", name, uid)
	}

	attach := exec.Command(k8sKubectl, "--kubeconfig", k8sAdmin, "attach", "-i", name, "-c", "c")
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

	killed := time.Now()
	if err := attach.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	attach.Wait()
	// Polled every millisecond: the figure is the point here.
	for deadline := killed.Add(ktest.Slack); !k8sGone(pid) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if !k8sGone(pid) {
		t.Fatalf("cat (pid %d) still runs %v after the attached kubectl was SIGKILLed", pid, ktest.Slack)
	}
	t.Logf("SIGKILL of kubectl attach -> the container's cat gone: %v", time.Since(killed).Round(100*time.Microsecond))
	if !k8sWaitFor(60*time.Second, func() bool { return phase() == "Succeeded" }) {
		t.Fatalf("pod %s phase %q 60 s after its process ended, want Succeeded", name, phase())
	}
	t.Logf("SIGKILL of kubectl attach -> the API shows the pod Succeeded: %v", time.Since(killed).Round(time.Millisecond))
}

// TestK8sClusterPodNetworkIsolated: a pod on the cluster's network
// (hostNetwork: false, the box pods' setting) has its own eth0 and reaches
// itself but not another pod: the macvlan "private" mode cluster.sh sets up.
func TestK8sClusterPodNetworkIsolated(t *testing.T) {
	k8sRequireCluster(t)
	suffix := fmt.Sprint(time.Now().UnixNano() % 1000000)
	a, b := "dw-k8s-net-a-"+suffix, "dw-k8s-net-b-"+suffix
	for _, name := range []string{a, b} {
		k8sPod(t, name, "localhost/deathwatch/busybox:1", `command: [sleep, "600"]`)
	}
	for _, name := range []string{a, b} {
		if !k8sWaitFor(120*time.Second, func() bool { return k8sPhase(t, name) == "Running" }) {
			t.Fatalf("pod %s not Running after 120 s", name)
		}
	}
	ipA := k8sCtl(t, "", "get", "pod", a, "-o", "jsonpath={.status.podIP}")
	ipB := k8sCtl(t, "", "get", "pod", b, "-o", "jsonpath={.status.podIP}")
	if ipA == "" || ipA == ipB {
		t.Fatalf("pod IPs %q and %q: want two distinct addresses", ipA, ipB)
	}
	ping := func(from, to string) error {
		return exec.Command(k8sKubectl, "--kubeconfig", k8sAdmin, "exec", from, "--", "ping", "-c1", "-W2", to).Run()
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
	k8sRequireCluster(t)
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
		exec.Command("ctr", "--address", k8sRun+"/containerd.sock", "-n", "k8s.io", "images", "rm", ref).Run()
	})
	name := "dw-k8s-import-" + tag[len(tag)-6:]
	k8sPod(t, name, ref)
	phase := func() string { return k8sPhase(t, name) }
	if !k8sWaitFor(120*time.Second, func() bool { p := phase(); return p == "Succeeded" || p == "Failed" }) || phase() != "Succeeded" {
		t.Fatalf("pod of the imported image: phase %q, want Succeeded; %s", phase(), k8sCtl(t, "", "get", "pod", name, "-o", "jsonpath={.status}"))
	}
	if logs := strings.TrimSpace(k8sCtl(t, "", "logs", name)); logs != "imported-"+tag {
		t.Fatalf("pod of the imported image printed %q, want %q", logs, "imported-"+tag)
	}
}

// k8sHostTraces lists what of the cluster is on the host: processes,
// mounts, cgroups, network links, folders, and the mount namespace
// (processes in it).
func k8sHostTraces(t *testing.T, mntns string) []string {
	t.Helper()
	var traces []string
	for pid, name := range k8sClusterPids(t) {
		traces = append(traces, fmt.Sprintf("process %s (%d)", name, pid))
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, "deathwatch-k8s") || strings.Contains(line, "/run/netns/cni-") {
			traces = append(traces, "mount "+line)
		}
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/deathwatch-k8s")
	more, _ := filepath.Glob("/sys/fs/cgroup/deathwatch-k8s")
	for _, c := range append(cgroups, more...) {
		traces = append(traces, "cgroup "+c)
	}
	if exec.Command("ip", "link", "show", "dwk8s0").Run() == nil {
		traces = append(traces, "network link dwk8s0")
	}
	for _, d := range []string{k8sState, k8sRun} {
		if _, err := os.Stat(d); err == nil {
			traces = append(traces, "folder "+d)
		}
	}
	// Folders the kubelet and containerd write into, masked in their mount
	// namespace: nothing of theirs may be there. (Others may use the folders
	// themselves: rootful Podman keeps its network namespaces in /run/netns.)
	for _, pattern := range []string{"/var/log/containers/*", "/var/lib/cni/*/deathwatch-k8s*", "/run/netns/cni-*"} {
		found, _ := filepath.Glob(pattern)
		for _, f := range found {
			traces = append(traces, "file "+f)
		}
	}
	if mntns != "" {
		procs, _ := filepath.Glob("/proc/[0-9]*/ns/mnt")
		for _, p := range procs {
			if ns, _ := os.Readlink(p); ns == mntns {
				traces = append(traces, "process in the cluster's mount namespace: "+p)
			}
		}
	}
	return traces
}

// k8sHostSysctls are the host values the kubelet would rewrite.
func k8sHostSysctls() string {
	var b strings.Builder
	for _, s := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"} {
		v, _ := os.ReadFile("/proc/sys/" + s)
		fmt.Fprintf(&b, "%s=%s ", s, strings.TrimSpace(string(v)))
	}
	return b.String()
}

// TestK8sClusterDownLeavesNothing: `down` stops the cluster and leaves no
// process, mount, cgroup, link, folder or namespace behind, Docker's
// containerd untouched; `up` then brings it back (warm: no build) with the
// host's sysctls unchanged.
func TestK8sClusterDownLeavesNothing(t *testing.T) {
	k8sRequireCluster(t)
	// Leave a running pod behind for down to clean up.
	k8sPod(t, "dw-k8s-leftover", "localhost/deathwatch/busybox:1", `command: [sleep, "3600"]`)
	if !k8sWaitFor(120*time.Second, func() bool {
		return k8sPhase(t, "dw-k8s-leftover") == "Running"
	}) {
		t.Fatal("pod dw-k8s-leftover not Running after 120 s")
	}
	pid, _ := os.ReadFile(k8sRun + "/containerd.pid")
	mntns, err := os.Readlink("/proc/" + strings.TrimSpace(string(pid)) + "/ns/mnt")
	if err != nil {
		t.Fatalf("the cluster's containerd: %v", err)
	}
	dockerd := exec.Command("pgrep", "-x", "dockerd")
	dockerBefore, _ := dockerd.Output()

	start := time.Now()
	out, err := k8sClusterSh("down").CombinedOutput()
	t.Logf("cluster.sh down (%v): %s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("cluster.sh down: %v", err)
	}
	if traces := k8sHostTraces(t, mntns); len(traces) > 0 {
		t.Errorf("after cluster.sh down the host still has:\n  %s", strings.Join(traces, "\n  "))
	}
	if err := k8sClusterSh("status").Run(); err == nil {
		t.Error("cluster.sh status exits 0 after down")
	}
	dockerAfter, _ := exec.Command("pgrep", "-x", "dockerd").Output()
	if !bytes.Equal(dockerBefore, dockerAfter) {
		t.Errorf("dockerd pids changed across cluster.sh down: %q -> %q", dockerBefore, dockerAfter)
	}

	sysctls := k8sHostSysctls()
	start = time.Now()
	out, err = k8sClusterSh("up").CombinedOutput()
	t.Logf("cluster.sh up (warm, to a pod that ran): %v: %s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("cluster.sh up after down: %v", err)
	}
	k8sRequireCluster(t)
	if after := k8sHostSysctls(); after != sysctls {
		t.Errorf("the host's sysctls changed across up:\n  before %s\n  after  %s", sysctls, after)
	}
}
