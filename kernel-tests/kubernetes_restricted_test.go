package kerneltests

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// TestKubernetesRestrictedProbe runs the restrictedprobe program as PID 1
// of a pod that passes Pod Security `restricted` (in a namespace that
// enforces it), with and without a user namespace of the pod's own, and
// holds the verdicts docs/runtimes/kubernetes.md states: the watcher
// can make no user namespace there, and an agent at the watcher's uid
// reaches PID 1 through none of the doors a not-dumpable PID 1 closes,
// but can still prlimit, renice and pin it, until a seccomp filter that
// lets those calls act on the caller alone and Landlock's signal scope
// wall it in.
func TestKubernetesRestrictedProbe(t *testing.T) {
	k := ktest.RequireK8s(t).TestNamespace(t, ktest.PodSecurity{Enforce: "restricted"})
	probe, err := os.ReadFile(ktest.ToolPath(t, "restrictedprobe"))
	if err != nil {
		t.Fatal(err)
	}
	refused := []string{
		"clone(CLONE_NEWUSER) by the watcher", "unshare(CLONE_NEWUSER) by the watcher",
		"unshare(CLONE_NEWUSER) by the attacker",
		"ptrace(PTRACE_ATTACH, 1)", "ptrace(PTRACE_SEIZE, 1)", "process_vm_readv(1)", "process_vm_writev(1)",
		"open /proc/1/fd/0", "open /proc/1/fd/1", "readdir /proc/1/fd", "open /proc/1/fd/4 for write",
		"open /proc/1/environ", "open /proc/1/mem", "open /proc/1/maps", "open /proc/1/cwd/.", "open /proc/1/root/.",
		"open /proc/1/oom_score_adj for write", "pidfd_getfd(1, 0)", "pidfd_getfd(1, 1)",
	}
	succeeded := []string{"prlimit(1, RLIMIT_CPU, 1s)", "prlimit(1, RLIMIT_NOFILE, 3)", "setpriority(PRIO_PROCESS, 1, 19)", "sched_setaffinity(1)"}
	for _, hostUsers := range []bool{true, false} {
		name := "probe-hostusers-" + map[bool]string{true: "true", false: "false"}[hostUsers]
		k.CreatePod(t, map[string]any{
			"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name},
			"spec": map[string]any{
				"hostUsers": hostUsers, "restartPolicy": "Never", "automountServiceAccountToken": false,
				"securityContext": map[string]any{"runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000,
					"seccompProfile": map[string]any{"type": "RuntimeDefault"}},
				"containers": []any{map[string]any{
					"name": "probe", "image": "localhost/deathwatch/busybox:1", "imagePullPolicy": "Never",
					// PID 1 becomes the probe once it is copied in.
					"command": []string{"/bin/sh", "-c", "while [ ! -x /tmp/probe ]; do sleep 0.2; done; exec /tmp/probe"},
					"securityContext": map[string]any{"allowPrivilegeEscalation": false,
						"capabilities": map[string]any{"drop": []string{"ALL"}}},
				}},
			},
		})
		t.Cleanup(func() { k.DeletePod(name) })
		if !ktest.WaitFor(2*time.Minute, func() bool {
			out, _ := k.Kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}")
			return out == "Running"
		}) {
			out, _ := k.Kubectl("get", "pod", name, "-o", "jsonpath={.status}")
			t.Fatalf("pod %s not running after 2 minutes: %s", name, out)
		}
		if err := k.KubectlStdin(probe, "exec", "-i", name, "--", "sh", "-c", "cat > /tmp/p.tmp && chmod 755 /tmp/p.tmp && mv /tmp/p.tmp /tmp/probe"); err != nil {
			t.Fatalf("copy the probe into %s: %v", name, err)
		}
		var log string
		if !ktest.WaitFor(time.Minute, func() bool {
			log, _ = k.Kubectl("logs", name)
			return strings.Contains(log, "PROBE DONE")
		}) {
			t.Fatalf("%s: no PROBE DONE within a minute:\n%s", name, log)
		}
		t.Logf("hostUsers: %v:\n%s", hostUsers, log)
		for _, a := range refused {
			if !regexp.MustCompile(`(?m)^ATTACK ` + regexp.QuoteMeta(a) + ` +refused: `).MatchString(log) {
				t.Errorf("hostUsers: %v: %s was not refused", hostUsers, a)
			}
		}
		for _, a := range succeeded {
			if !regexp.MustCompile(`(?m)^ATTACK ` + regexp.QuoteMeta(a) + ` +SUCCEEDED`).MatchString(log) {
				t.Errorf("hostUsers: %v: %s no longer succeeds: docs/runtimes/kubernetes.md's list of what a restricted pod leaves open is out of date", hostUsers, a)
			}
		}
		// Behind the walls a restricted mode would add, the calls that
		// reach PID 1 above are refused too, and so is every signal.
		walled := append(append([]string{"kill(1, SIGTERM)", "kill(1, SIGKILL)", "kill(1, SIGSTOP)"}, refused[2:]...), succeeded...)
		for _, a := range walled {
			if !regexp.MustCompile(`(?m)^WALLED ` + regexp.QuoteMeta(a) + ` +refused: `).MatchString(log) {
				t.Errorf("hostUsers: %v: behind the walls, %s was not refused", hostUsers, a)
			}
		}
		for _, mode := range []string{"walled", "plain"} {
			if !strings.Contains(log, "init: "+mode+" attacker ended: <nil>; init still alive") {
				t.Errorf("hostUsers: %v: PID 1 did not survive the %s attacker, or the attacker failed", hostUsers, mode)
			}
		}
	}
}

// TestKubernetesRestricted: --kube-pod-security restricted in a
// namespace that enforces restricted. A box runs there as a user checks
// it (its output, its exit code, an environment variable over the
// stream; the agent at the pod's uid with no capability); its agent runs
// restrictedprobe's attacks on PID 1 and every one is refused, and the
// watcher still reports the agent's exit; doctor names the level and
// the mode; SIGKILL of a controller that runs `supervisor exec` ends the
// box and its pod.
func TestKubernetesRestricted(t *testing.T) {
	r := newK8sRigIn(t, ktest.PodSecurity{Enforce: "restricted", Warn: "restricted"})
	probe, err := os.ReadFile(ktest.ToolPath(t, "restrictedprobe"))
	if err != nil {
		t.Fatal(err)
	}
	secret := "dw-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	script := `echo "secret=$DW_SECRET"
echo "uid=$(id -u) gid=$(id -g)"
grep -E '^(Cap(Eff|Prm|Bnd|Amb)|NoNewPrivs):' /proc/self/status
cat > /tmp/attack && chmod 755 /tmp/attack && /tmp/attack attack
echo "attacks done"
exit 7`
	c := r.cmd([]string{"DW_SECRET=" + secret}, r.execArgs("--kube-pod-security", "restricted", "--env", "DW_SECRET", "-i", "--", "sh", "-c", script)...)
	c.Stdin = bytes.NewReader(probe)
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	err = c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	out := o.String()
	t.Logf("restricted box: exit %d\n%s\nstderr:\n%s", code, out, e.String())
	if code != 7 || !strings.Contains(out, "attacks done") {
		t.Errorf("exit %d, want the agent's 7 after its attacks", code)
	}
	for _, want := range []string{"secret=" + secret, "uid=1000 gid=1000", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(out, want) {
			t.Errorf("the agent does not see %q", want)
		}
	}
	for _, a := range unrefused(out) {
		t.Errorf("the agent's %s was not refused", a)
	}
	if ps := r.podsIn(r.k.Namespace); len(ps) != 0 {
		t.Errorf("pods left after the box: %v", ps)
	}

	d := r.cmd(nil, "--instance", r.instance, "--journal", r.journal(), "doctor", "--runtime", "kubernetes", "--image", r.image,
		"--kube-pod-security", "restricted", "--posture", "preferred", "--skip-proof")
	dout, err := d.CombinedOutput()
	t.Logf("doctor --kube-pod-security restricted: %v\n%s", err, dout)
	for _, want := range []string{`namespace ` + r.k.Namespace + ` enforces Pod Security "restricted"`, "boxes use --kube-pod-security restricted"} {
		if !strings.Contains(string(dout), want) {
			t.Errorf("doctor does not say %q", want)
		}
	}

	marker := chainMarker("k8srestricted")
	ctl := r.startChain(t, "go", "main", 1, marker, append([]string{"--kube-pod-security", "restricted"}, chainAgent(marker, false)...)...)
	ctl.until("ready")
	if got := r.pods(); len(got) != 1 {
		t.Fatalf("pods of the instance %v; want 1", got)
	}
	ps := ctl.procs(2)
	at := ctl.kill()
	dead := chainDead(t, ps, at, "after SIGKILL of the controller, the supervisor and the agent")
	var left []string
	if !ktest.WaitFor(chainCeiling, func() bool { left = r.pods(); return len(left) == 0 }) {
		t.Fatalf("pods %v left %v after the controller's death", left, chainCeiling)
	}
	t.Logf("restricted: controller SIGKILL → supervisor and agent dead %v, → pod gone %v", dead.Round(time.Millisecond), time.Since(at).Round(time.Millisecond))
	if code, rep := r.reconcile(); code != 0 || len(rep.Blocked) != 0 {
		t.Fatalf("reconcile at restart: exit %d, blocked %+v", code, rep.Blocked)
	}
}
