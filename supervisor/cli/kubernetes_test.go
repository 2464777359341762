package cli

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// --kube-context, --kube-namespace and --kube-pod-security (and their
// variables) are in --help, and reach the runtime as its
// engine-environment variables.
func TestKubeGlobals(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"exec", "--help"}, {"reconcile", "--help"}} {
		var out, errb bytes.Buffer
		run(args, &cmdContext{stdout: &out, stderr: &errb, getenv: os.LookupEnv})
		for _, want := range []string{"--kube-context=NAME", "DEATHWATCH_K8S_CONTEXT", "--kube-namespace=NAME", "DEATHWATCH_K8S_NAMESPACE",
			"--kube-pod-security=baseline|restricted", "DEATHWATCH_K8S_POD_SECURITY", "Linux 6.12"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: no %s in\n%s", args, want, out.String())
			}
		}
	}
	env := []string{"A=1", "DEATHWATCH_K8S_NAMESPACE=old"}
	if got := (KubeGlobals{}).engineEnv(env); &got[0] != &env[0] {
		t.Error("no flag set: the environment was copied")
	}
	got := KubeGlobals{Context: "prod", Namespace: "agents", PodSecurity: "restricted"}.engineEnv(env)
	if want := []string{"A=1", "DEATHWATCH_K8S_CONTEXT=prod", "DEATHWATCH_K8S_NAMESPACE=agents", "DEATHWATCH_K8S_POD_SECURITY=restricted"}; !slices.Equal(got, want) {
		t.Errorf("engineEnv = %q, want %q", got, want)
	}
	// reconcile on a kubeconfig without the context: the flag reached the runtime.
	dir := t.TempDir()
	kc := dir + "/kc"
	os.WriteFile(kc, []byte("current-context: a\ncontexts: [{name: a, context: {cluster: k}}]\nclusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"), 0o600)
	var out, errb bytes.Buffer
	c := &cmdContext{stdout: &out, stderr: &errb, getenv: os.LookupEnv, env: []string{"KUBECONFIG=" + kc, "HOME=" + dir}}
	run([]string{"--journal", dir, "--kube-context", "nosuch", "reconcile", "--runtime", "kubernetes"}, c)
	if !strings.Contains(out.String()+errb.String(), "--kube-context nosuch: kubeconfig") {
		t.Errorf("reconcile --kube-context nosuch: the context did not reach the runtime:\n%s\n%s", out.String(), errb.String())
	}
}

func TestKubeExecFlags(t *testing.T) {
	k := KubeExec{NodeSelector: []string{"pool=agents", "zone=a"}, Toleration: []string{"agents:NoSchedule"}, RuntimeClass: "gvisor",
		PullSecret: []string{"regcred"}, PullNever: true, UserNamespace: true, CPULimit: "2"}
	env := k.engineEnv([]string{"A=1"}, time.Hour, 2*time.Second)
	for _, want := range []string{"A=1", "DEATHWATCH_K8S_NODE_SELECTOR=pool=agents,zone=a", "DEATHWATCH_K8S_TOLERATIONS=agents:NoSchedule",
		"DEATHWATCH_K8S_RUNTIME_CLASS=gvisor", "DEATHWATCH_K8S_PULL_SECRETS=regcred", "DEATHWATCH_K8S_PULL_NEVER=1",
		"DEATHWATCH_K8S_USER_NAMESPACE=1", "DEATHWATCH_K8S_CPU_LIMIT=2", "DEATHWATCH_K8S_AGENT_DEADLINE=3602"} {
		if !slices.Contains(env, want) {
			t.Errorf("engineEnv = %q: no %s", env, want)
		}
	}
	if env := (KubeExec{}).engineEnv([]string{"A=1"}, 0, time.Second); !slices.Equal(env, []string{"A=1"}) {
		t.Errorf("no flags, no deadline: %q", env)
	}
	var out bytes.Buffer
	run([]string{"exec", "--help"}, &cmdContext{stdout: &out, stderr: &out, getenv: os.LookupEnv})
	for _, want := range []string{"--kube-runtime-class=NAME", "--kube-node-selector=KEY=VALUE", "--kube-toleration=KEY[=VALUE][:EFFECT]",
		"--kube-pull-secret=SECRET", "--kube-cpu-limit=QUANTITY", "--kube-ephemeral-storage-limit=QUANTITY", "--kube-user-namespace", "DEATHWATCH_K8S_RUNTIME_CLASS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("exec --help lacks %s", want)
		}
	}
}
