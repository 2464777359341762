package kerneltests

import (
	"os"
	"regexp"
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
