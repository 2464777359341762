package kerneltests

// The pod settings a cluster's users set, on the test cluster: a
// RuntimeClass, a node selector and a toleration, a pull secret, CPU and
// ephemeral-storage requests and limits, the activeDeadlineSeconds
// backstop from --deadline; a RuntimeClass the cluster lacks is 240, one
// line; a namespace whose ResourceQuota requires limits.cpu refuses a box
// without --kube-cpu-limit (243, one line) and runs one with it.

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// kubectlApply applies a manifest (JSON or YAML) with the admin's
// kubeconfig.
func kubectlApply(t *testing.T, k *ktest.K8s, manifest string, extra ...string) {
	t.Helper()
	c := exec.Command(ktest.K8sKubectl, append([]string{"--kubeconfig", k.Kubeconfig, "apply", "-f", "-"}, extra...)...)
	c.Stdin = strings.NewReader(manifest)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, manifest)
	}
}

func TestKubernetesKnobs(t *testing.T) {
	r := newK8sRig(t)
	// A RuntimeClass whose handler is containerd's default runtime: the
	// same path a gVisor or Kata class takes through the API and the
	// kubelet (neither runsc nor kata can be had from the registries
	// here).
	kubectlApply(t, r.k, `{"apiVersion":"node.k8s.io/v1","kind":"RuntimeClass","metadata":{"name":"dw-test-runc"},"handler":"runc"}`)
	t.Cleanup(func() { r.k.Kubectl("delete", "runtimeclass", "dw-test-runc", "--ignore-not-found", "--wait=false") })
	node, err := r.k.Kubectl("get", "nodes", "-o", "jsonpath={.items[0].metadata.labels.kubernetes\\.io/hostname}")
	if err != nil || node == "" {
		t.Fatalf("the node's hostname label: %q %v", node, err)
	}
	args := []string{"--deadline", "1h", "--grace", "2s", "--kube-runtime-class", "dw-test-runc",
		"--kube-node-selector", "kubernetes.io/hostname=" + node, "--kube-toleration", "dw-test=yes:NoSchedule",
		"--kube-pull-secret", "dw-test-regcred", "--kube-cpu-request", "10m", "--kube-cpu-limit", "500m",
		"--kube-ephemeral-storage-request", "32Mi", "--kube-ephemeral-storage-limit", "512Mi",
		"--", "sh", "-c", `cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d' ' -f1 /sys/fs/cgroup/cpu.max; echo started; sleep 4`}
	run := r.start(nil, args...)
	var spec struct {
		Spec struct {
			RuntimeClassName      string            `json:"runtimeClassName"`
			NodeSelector          map[string]string `json:"nodeSelector"`
			Tolerations           []struct{ Key, Operator, Value, Effect string }
			ImagePullSecrets      []map[string]string `json:"imagePullSecrets"`
			ActiveDeadlineSeconds int64               `json:"activeDeadlineSeconds"`
			Containers            []struct {
				Resources struct{ Requests, Limits map[string]string }
			}
		}
	}
	got := ktest.WaitFor(60*time.Second, func() bool {
		select {
		case <-run.done:
			return true // too late: the check below says so
		default:
		}
		ps := r.pods()
		if len(ps) != 1 {
			return false
		}
		out, err := r.k.Kubectl("get", "pod", ps[0], "-o", "json")
		if err == nil {
			if err := json.Unmarshal([]byte(out), &spec); err != nil {
				t.Fatalf("the pod as kubectl reads it: %v", err)
			}
		}
		return err == nil
	})
	<-run.done
	out := run.stdout()
	t.Logf("exit %d:\n%s", run.cmd.ProcessState.ExitCode(), out)
	if !got || spec.Spec.RuntimeClassName == "" && len(spec.Spec.Containers) == 0 {
		t.Fatal("no pod of the run to read")
	}
	s := spec.Spec
	if s.RuntimeClassName != "dw-test-runc" || s.NodeSelector["kubernetes.io/hostname"] != node || len(s.ImagePullSecrets) != 1 || s.ImagePullSecrets[0]["name"] != "dw-test-regcred" {
		t.Errorf("pod spec %+v", s)
	}
	tolerated := false
	for _, tl := range s.Tolerations { // the API server adds its default ones
		tolerated = tolerated || tl.Key == "dw-test" && tl.Operator == "Equal" && tl.Value == "yes" && tl.Effect == "NoSchedule"
	}
	if !tolerated {
		t.Errorf("tolerations %+v: no dw-test=yes:NoSchedule", s.Tolerations)
	}
	if want := int64(3602 + 120 + 60); s.ActiveDeadlineSeconds != want {
		t.Errorf("activeDeadlineSeconds %d, want %d (--deadline 1h + --grace 2s + the start's allowance)", s.ActiveDeadlineSeconds, want)
	}
	res := s.Containers[0].Resources
	if res.Requests["cpu"] != "10m" || res.Limits["cpu"] != "500m" || res.Requests["ephemeral-storage"] != "32Mi" || res.Limits["ephemeral-storage"] != "512Mi" {
		t.Errorf("resources %+v", res)
	}
	if run.cmd.ProcessState.ExitCode() != 0 || !strings.Contains(out, "started") || !strings.Contains(out, "50000") {
		t.Errorf("the box under the knobs: exit %d, %q: want 0 and a CPU quota of 50000 (500m of a 100000 period)", run.cmd.ProcessState.ExitCode(), out)
	}

	code, _, errs := r.run(nil, "--kube-runtime-class", "dw-no-such-class", "--", "true")
	if code != shared.ExitUsage || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "kubectl get runtimeclass") {
		t.Errorf("a RuntimeClass the cluster lacks: exit %d %q; want %d and one line", code, errs, shared.ExitUsage)
	}
}

func TestKubernetesResourceQuota(t *testing.T) {
	r := newK8sRig(t)
	ns := r.k.TestNamespace(t, ktest.PodSecurity{Enforce: "baseline", Warn: "restricted"}).Namespace
	kubectlApply(t, r.k, `{"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":"cpu","namespace":"`+ns+`"},"spec":{"hard":{"limits.cpu":"8"}}}`)
	// Admission counts against the quota's status, which the
	// controller-manager fills in; where the cluster has none, the test
	// fills it.
	if out, err := r.k.Kubectl("get", "resourcequota", "cpu", "-n", ns, "-o", "jsonpath={.status.hard}"); err != nil || out == "" {
		patch := `{"status":{"hard":{"limits.cpu":"8"},"used":{"limits.cpu":"0"}}}`
		c := exec.Command(ktest.K8sKubectl, "--kubeconfig", r.k.Kubeconfig, "-n", ns, "patch", "resourcequota", "cpu", "--subresource=status", "--type=merge", "-p", patch)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("kubectl patch the quota's status: %v\n%s", err, out)
		}
	}
	code, out := r.runIn(ns, "--", "true")
	t.Logf("without --kube-cpu-limit: exit %d: %s", code, out)
	if code != shared.ExitRefused || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "--kube-cpu-limit") {
		t.Errorf("a quota requiring limits.cpu, no --kube-cpu-limit: exit %d %q; want %d, one line naming the flag", code, out, shared.ExitRefused)
	}
	code, out = r.runIn(ns, "--kube-cpu-limit", "1", "--", "sh", "-c", "echo within-quota")
	if code != 0 || !strings.Contains(out, "within-quota") {
		t.Errorf("with --kube-cpu-limit 1: exit %d %q", code, out)
	}
}
