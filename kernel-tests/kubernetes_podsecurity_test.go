package kerneltests

// Pod Security and the pod's walls on the test cluster: a namespace
// enforcing restricted refuses every baseline box (243, before anything
// exists, one line naming the level a box needs, why, and
// --kube-pod-security restricted); in one enforcing
// baseline the agent runs as another uid with no capabilities, on a
// read-only root with a bounded /tmp and no service-account token; a
// missing namespace is 240, one line.

import (
	"os/exec"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// podsIn lists the pods of ns with the rig's instance label.
func (r *k8sRig) podsIn(ns string) []string {
	r.t.Helper()
	out, err := exec.Command(ktest.K8sKubectl, "--kubeconfig", r.k.Kubeconfig, "-n", ns, "get", "pods",
		"-l", shared.LabelInstance+"="+r.instance, "-o", "jsonpath={.items[*].metadata.name}").Output()
	if err != nil {
		r.t.Fatalf("kubectl get pods -n %s: %v", ns, err)
	}
	return strings.Fields(string(out))
}

// runIn runs exec with --kube-namespace ns.
func (r *k8sRig) runIn(ns string, extra ...string) (int, string) {
	r.t.Helper()
	c := r.cmd(nil, append([]string{"--kube-namespace", ns}, r.execArgs(extra...)...)...)
	out, err := c.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		for _, p := range r.podsIn(ns) {
			exec.Command(ktest.K8sKubectl, "--kubeconfig", r.k.Kubeconfig, "-n", ns, "delete", "pod", p, "--grace-period=0", "--force", "--wait=false").Run()
		}
	})
	return code, string(out)
}

func TestKubernetesPodSecurity(t *testing.T) {
	r := newK8sRig(t)
	restricted := r.k.TestNamespace(t, ktest.PodSecurity{Enforce: "restricted", Warn: "restricted"}).Namespace
	baseline := r.k.TestNamespace(t, ktest.PodSecurity{Enforce: "baseline", Warn: "restricted"}).Namespace

	code, out := r.runIn(restricted, "--", "true")
	t.Logf("restricted: exit %d: %s", code, out)
	if code != shared.ExitRefused || strings.Count(strings.TrimSpace(out), "\n") != 0 ||
		!strings.Contains(out, `enforces Pod Security "restricted"`) || !strings.Contains(out, "needs baseline") || !strings.Contains(out, "SETUID") || !strings.Contains(out, "pass --kube-pod-security restricted") {
		t.Errorf("a namespace enforcing restricted: exit %d %q; want %d, one line naming the level a box needs, why, and the flag for restricted", code, out, shared.ExitRefused)
	}
	// A user namespace relaxes restricted's non-root rules, not its
	// capabilities rule: still refused, for the capabilities alone.
	code, out = r.runIn(restricted, "--kube-user-namespace", "--", "true")
	t.Logf("restricted, hostUsers: false: exit %d: %s", code, out)
	if code != shared.ExitRefused || !strings.Contains(out, "unrestricted capabilities") || strings.Contains(out, "runAsNonRoot") {
		t.Errorf("a namespace enforcing restricted, with --kube-user-namespace: exit %d %q; want %d for the capabilities only", code, out, shared.ExitRefused)
	}
	if ps := r.podsIn(restricted); len(ps) != 0 {
		t.Errorf("pods in the restricted namespace after the refusal: %v", ps)
	}

	// In baseline, the agent as a user would check it.
	script := `echo uid=$(id -u) gid=$(id -g)
grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status
grep -E '^NoNewPrivs:' /proc/self/status
touch /rootfs-write 2>/dev/null && echo root-writable || echo root-read-only
echo x > /tmp/x && echo tmp-writable
df -k /tmp | tail -1 | awk '{print "tmp-kb=" $2}'
ls /var/run/secrets/kubernetes.io/serviceaccount 2>/dev/null && echo token-mounted || echo no-token`
	code, out = r.runIn(baseline, "--", "sh", "-c", script)
	t.Logf("baseline: exit %d:\n%s", code, out)
	for _, want := range []string{"uid=1000 gid=1000", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000",
		"NoNewPrivs:\t1", "root-read-only", "tmp-writable", "tmp-kb=1048576", "no-token"} {
		if !strings.Contains(out, want) {
			t.Errorf("baseline: the agent does not see %q", want)
		}
	}
	if code != 0 {
		t.Errorf("baseline: exit %d, want 0", code)
	}

	code, out = r.runIn("dw-no-such-namespace", "--", "true")
	if code != shared.ExitUsage || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "kubectl create namespace dw-no-such-namespace") {
		t.Errorf("a missing namespace: exit %d %q; want %d and one line saying what to do", code, out, shared.ExitUsage)
	}
}

// uidMapOf is the outside start of the first uid_map line in out ("" if
// none).
func uidMapOf(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "0" {
			return f[1]
		}
	}
	return ""
}

// --kube-user-namespace: each box's pod in a user namespace of its own
// (hostUsers: false), the agent still uid 1000 with no capabilities,
// two live boxes on ranges of host ids of their own, none the node's.
func TestKubernetesUserNamespace(t *testing.T) {
	r := newK8sRig(t)
	script := `cat /proc/self/uid_map; echo uid=$(id -u); grep '^CapEff:' /proc/self/status`
	first := r.start(nil, "--kube-user-namespace", "--", "sh", "-c", script+"; sleep 6")
	ktest.WaitFor(60e9, func() bool { return strings.Contains(first.stdout(), "uid=") })
	code, out, errs := r.run(nil, "--kube-user-namespace", "--", "sh", "-c", script)
	<-first.done
	t.Logf("first box:\n%s\nsecond box (exit %d):\n%s%s", first.stdout(), code, out, errs)
	a, b := uidMapOf(first.stdout()), uidMapOf(out)
	if code != 0 || !strings.Contains(out, "uid=1000") || !strings.Contains(out, "CapEff:\t0000000000000000") {
		t.Errorf("the agent in a user-namespaced pod: exit %d %q; want uid 1000, no capabilities", code, out)
	}
	if a == "" || b == "" || a == "0" || b == "0" || a == b {
		t.Errorf("uid 0 of the boxes maps to host %q and %q: want two ranges of their own, neither the node's", a, b)
	}
}
