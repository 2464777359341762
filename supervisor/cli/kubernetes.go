package cli

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"deathwatch/supervisor"
	"deathwatch/supervisor/runtime/kubernetes"
)

// KubernetesCmd is `supervisor kubernetes`: what the kubernetes runtime
// needs from a cluster.
type KubernetesCmd struct {
	Rbac KubernetesRBACCmd `cmd:"" name:"rbac" help:"Print the minimal Role and RoleBinding the kubernetes runtime needs (kubectl apply -f -)."`
}

// KubernetesRBACCmd is `supervisor kubernetes rbac`.
type KubernetesRBACCmd struct {
	Namespace   string `help:"The namespace the boxes run in." default:"default" env:"DEATHWATCH_K8S_NAMESPACE"`
	SubjectKind string `help:"User, Group or ServiceAccount." default:"ServiceAccount" enum:"User,Group,ServiceAccount"`
	Subject     string `help:"The identity the supervisor uses." required:""`
}

// Run prints the manifest.
func (k *KubernetesRBACCmd) Run(c *cmdContext) error {
	out, err := kubernetes.RBAC(k.Namespace, k.SubjectKind, k.Subject)
	if err != nil {
		return supervisor.UsageError("%v", err)
	}
	_, err = fmt.Fprint(c.stdout, out)
	return err
}

// KubeGlobals are the kubernetes runtime's flags every command takes
// (exec, ls, reconcile, doctor and prove-deathwatch see one cluster).
// They reach the runtime as its engine-environment variables.
type KubeGlobals struct {
	Context   string `help:"kubernetes: the kubeconfig context to use (default: its current-context), as kubectl --context." env:"DEATHWATCH_K8S_CONTEXT" placeholder:"NAME"`
	Namespace string `help:"kubernetes: the namespace of the boxes (default: the context's, else default), as kubectl --namespace." env:"DEATHWATCH_K8S_NAMESPACE" placeholder:"NAME"`
}

// engineEnv is env (nil: the process's) with the flags set as the
// runtime's variables; env itself when no flag is set.
func (k KubeGlobals) engineEnv(env []string) []string {
	return withEnv(env, map[string]string{kubernetes.EnvContext: k.Context, kubernetes.EnvNamespace: k.Namespace})
}

// withEnv is env (nil: the process's) with the non-empty values of set
// in place of the names' earlier values; env itself when none is set.
func withEnv(env []string, set map[string]string) []string {
	any := false
	for _, v := range set {
		any = any || v != ""
	}
	if !any {
		return env
	}
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if v, ok := set[name]; !ok || v == "" {
			out = append(out, kv)
		}
	}
	for _, name := range sortedKeys(set) {
		if v := set[name]; v != "" {
			out = append(out, name+"="+v)
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
