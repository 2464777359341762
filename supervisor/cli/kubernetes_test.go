package cli

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
)

// --kube-context and --kube-namespace (and their variables) are in
// --help, and reach the runtime as its engine-environment variables.
func TestKubeGlobals(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"exec", "--help"}, {"reconcile", "--help"}} {
		var out, errb bytes.Buffer
		run(args, &cmdContext{stdout: &out, stderr: &errb, getenv: os.LookupEnv})
		for _, want := range []string{"--kube-context=NAME", "DEATHWATCH_K8S_CONTEXT", "--kube-namespace=NAME", "DEATHWATCH_K8S_NAMESPACE"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: no %s in\n%s", args, want, out.String())
			}
		}
	}
	env := []string{"A=1", "DEATHWATCH_K8S_NAMESPACE=old"}
	if got := (KubeGlobals{}).engineEnv(env); &got[0] != &env[0] {
		t.Error("no flag set: the environment was copied")
	}
	got := KubeGlobals{Context: "prod", Namespace: "agents"}.engineEnv(env)
	if want := []string{"A=1", "DEATHWATCH_K8S_CONTEXT=prod", "DEATHWATCH_K8S_NAMESPACE=agents"}; !slices.Equal(got, want) {
		t.Errorf("engineEnv = %q, want %q", got, want)
	}
	// reconcile on a kubeconfig without the context: the flag reached the runtime.
	dir := t.TempDir()
	kc := dir + "/kc"
	os.WriteFile(kc, []byte("current-context: a\ncontexts: [{name: a, context: {cluster: k}}]\nclusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"), 0o600)
	var out, errb bytes.Buffer
	c := &cmdContext{stdout: &out, stderr: &errb, getenv: os.LookupEnv, env: []string{"KUBECONFIG=" + kc, "HOME=" + dir}}
	run([]string{"--journal", dir, "--kube-context", "nosuch", "reconcile", "--runtime", "kubernetes"}, c)
	if !strings.Contains(out.String()+errb.String(), `no context "nosuch"`) {
		t.Errorf("reconcile --kube-context nosuch: the context did not reach the runtime:\n%s\n%s", out.String(), errb.String())
	}
}
