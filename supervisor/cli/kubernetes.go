package cli

import (
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/runtime/kubernetes"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
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
		return exitcode.Usage("%w", err)
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
	// PodSecurity is chosen, never followed from the namespace's label
	// (see the runtime's podsecurity.go).
	PodSecurity string `help:"kubernetes: the Pod Security level the box's pod passes: baseline (default; the agent at a uid of its own, the watcher keeps SETUID, SETGID, SETPCAP, KILL and CHOWN) or restricted (no capability: the agent shares the watcher's uid, walled off PID 1 by Landlock's signal scope and a seccomp wall; needs Linux 6.12 on the node)." env:"DEATHWATCH_K8S_POD_SECURITY" placeholder:"baseline|restricted"`
}

// engineEnv is env (nil: the process's) with the flags set as the
// runtime's variables; env itself when no flag is set.
func (k KubeGlobals) engineEnv(env []string) []string {
	return withEnv(env, map[string]string{kubernetes.EnvContext: k.Context, kubernetes.EnvNamespace: k.Namespace, kubernetes.EnvPodSecurity: k.PodSecurity})
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
	for _, name := range slices.Sorted(maps.Keys(set)) {
		if v := set[name]; v != "" {
			out = append(out, name+"="+v)
		}
	}
	return out
}

// KubeExec are exec's flags for the pods of the kubernetes runtime.
// They reach the runtime as its engine-environment variables (lists
// comma-separated).
type KubeExec struct {
	Node                    string   `help:"kubernetes: run the pod on this node (spec.nodeName; a cluster without a scheduler)." env:"DEATHWATCH_K8S_NODE" placeholder:"NODE"`
	NodeSelector            []string `help:"kubernetes: schedule the pod on nodes with this label (repeatable)." env:"DEATHWATCH_K8S_NODE_SELECTOR" sep:"none" placeholder:"KEY=VALUE"`
	Toleration              []string `help:"kubernetes: tolerate this taint (repeatable; no VALUE: any value; no EFFECT: every effect)." env:"DEATHWATCH_K8S_TOLERATIONS" sep:"none" placeholder:"KEY[=VALUE][:EFFECT]"`
	RuntimeClass            string   `help:"kubernetes: the pod's RuntimeClass (gVisor, Kata: a kernel of the box's own)." env:"DEATHWATCH_K8S_RUNTIME_CLASS" placeholder:"NAME"`
	PullSecret              []string `help:"kubernetes: an image pull secret of the namespace (repeatable)." env:"DEATHWATCH_K8S_PULL_SECRETS" sep:"none" placeholder:"SECRET"`
	PullNever               bool     `help:"kubernetes: imagePullPolicy Never (the image must be on the node)." env:"DEATHWATCH_K8S_PULL_NEVER"`
	WatcherImage            string   `help:"kubernetes: an image with the watcher at /usr/local/bin/watcher, which an init container copies in (for a box image without one)." env:"DEATHWATCH_K8S_WATCHER_IMAGE" placeholder:"IMAGE"`
	UserNamespace           bool     `help:"kubernetes: give the pod a user namespace of its own (hostUsers: false; the node's container runtime must support it): the box's ids are no other pod's or the node's." env:"DEATHWATCH_K8S_USER_NAMESPACE"`
	CPURequest              string   `help:"kubernetes: the box's CPU request (e.g. 500m)." env:"DEATHWATCH_K8S_CPU_REQUEST" placeholder:"QUANTITY"`
	CPULimit                string   `help:"kubernetes: the box's CPU limit (a namespace's ResourceQuota may require one)." env:"DEATHWATCH_K8S_CPU_LIMIT" placeholder:"QUANTITY"`
	EphemeralStorageRequest string   `help:"kubernetes: the box's ephemeral-storage request (default 64Mi)." env:"DEATHWATCH_K8S_STORAGE_REQUEST" placeholder:"QUANTITY"`
	EphemeralStorageLimit   string   `help:"kubernetes: the box's ephemeral-storage limit: its log and any writable layer (default 1Gi)." env:"DEATHWATCH_K8S_STORAGE_LIMIT" placeholder:"QUANTITY"`
}

// engineEnv is env with the flags set as the runtime's variables, and
// the agent's deadline plus grace (the pod's activeDeadlineSeconds
// backstop) when there is a deadline.
func (k KubeExec) engineEnv(env []string, deadline, grace time.Duration) []string {
	set := map[string]string{
		kubernetes.EnvNode: k.Node, kubernetes.EnvNodeSelector: strings.Join(k.NodeSelector, ","),
		kubernetes.EnvTolerations: strings.Join(k.Toleration, ","), kubernetes.EnvRuntimeClass: k.RuntimeClass,
		kubernetes.EnvPullSecrets: strings.Join(k.PullSecret, ","), kubernetes.EnvWatcherImage: k.WatcherImage,
		kubernetes.EnvCPURequest: k.CPURequest, kubernetes.EnvCPULimit: k.CPULimit,
		kubernetes.EnvStorageRequest: k.EphemeralStorageRequest, kubernetes.EnvStorageLimit: k.EphemeralStorageLimit,
	}
	if k.PullNever {
		set[kubernetes.EnvPullNever] = "1"
	}
	if k.UserNamespace {
		set[kubernetes.EnvUserNamespace] = "1"
	}
	if deadline > 0 {
		set[kubernetes.EnvAgentDeadline] = strconv.FormatInt(int64(math.Ceil((deadline + grace).Seconds())), 10)
	}
	return withEnv(env, set)
}
