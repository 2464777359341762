package cli

import (
	"fmt"

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
