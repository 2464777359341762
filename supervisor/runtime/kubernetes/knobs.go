package kubernetes

// The pod settings a user sets for their cluster (the CLI's exec
// --kube-* flags, which reach the runtime as these engine-environment
// variables): a RuntimeClass (gVisor, Kata), image pull secrets, node
// selector and tolerations, CPU and ephemeral-storage requests and
// limits, and the agent's deadline, from which the pod gets an
// activeDeadlineSeconds backstop.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The knobs' variables. Lists are comma-separated.
const (
	EnvRuntimeClass   = "DEATHWATCH_K8S_RUNTIME_CLASS"   // spec.runtimeClassName
	EnvPullSecrets    = "DEATHWATCH_K8S_PULL_SECRETS"    // spec.imagePullSecrets: NAME,...
	EnvNodeSelector   = "DEATHWATCH_K8S_NODE_SELECTOR"   // spec.nodeSelector: KEY=VALUE,...
	EnvTolerations    = "DEATHWATCH_K8S_TOLERATIONS"     // spec.tolerations: KEY[=VALUE][:EFFECT],...
	EnvCPURequest     = "DEATHWATCH_K8S_CPU_REQUEST"     // the box container's requests.cpu
	EnvCPULimit       = "DEATHWATCH_K8S_CPU_LIMIT"       // limits.cpu
	EnvStorageRequest = "DEATHWATCH_K8S_STORAGE_REQUEST" // requests.ephemeral-storage
	EnvStorageLimit   = "DEATHWATCH_K8S_STORAGE_LIMIT"   // limits.ephemeral-storage (default DefaultEphemeralStorage)
	EnvAgentDeadline  = "DEATHWATCH_K8S_AGENT_DEADLINE"  // the agent's --deadline plus --grace, in seconds; "" or 0: none
)

// Toleration is one of the pod's tolerations.
type Toleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator"`
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"`
}

// quantity is the shape of a Kubernetes resource quantity (a decimal
// with an optional SI or binary suffix or exponent).
var quantity = lazyRegexp(`^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[numkMGTPE]|[KMGTPE]i)?$`)

// list splits a comma-separated value, dropping empty items.
func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ParseTolerations reads KEY[=VALUE][:EFFECT] items (kubectl taint's
// spelling): with a value the operator is Equal, without it Exists;
// no effect tolerates every effect of the key.
func ParseTolerations(v string) ([]Toleration, error) {
	var out []Toleration
	for _, item := range list(v) {
		t := Toleration{Operator: "Exists"}
		kv, effect, _ := strings.Cut(item, ":")
		switch effect {
		case "", "NoSchedule", "PreferNoSchedule", "NoExecute":
			t.Effect = effect
		default:
			return nil, fmt.Errorf("--kube-toleration %q: the effect is NoSchedule, PreferNoSchedule or NoExecute", item)
		}
		k, val, hasValue := strings.Cut(kv, "=")
		if k == "" || !labelName().MatchString(k) {
			return nil, fmt.Errorf("--kube-toleration %q: want KEY[=VALUE][:EFFECT] with a label key", item)
		}
		t.Key = k
		if hasValue {
			if !labelValue().MatchString(val) || len(val) > 63 {
				return nil, fmt.Errorf("--kube-toleration %q: %q is not a label value", item, val)
			}
			t.Operator, t.Value = "Equal", val
		}
		out = append(out, t)
	}
	return out, nil
}

// ParseNodeSelector reads KEY=VALUE items.
func ParseNodeSelector(v string) (map[string]string, error) {
	items := list(v)
	if len(items) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, item := range items {
		k, val, ok := strings.Cut(item, "=")
		if !ok || !labelName().MatchString(k) || !labelValue().MatchString(val) || len(val) > 63 {
			return nil, fmt.Errorf("--kube-node-selector %q: want KEY=VALUE, a label key and value", item)
		}
		m[k] = val
	}
	return m, nil
}

// knobs reads the knobs of env into o.
func knobs(env []string, o *Options) error {
	o.RuntimeClass = getenv(env, EnvRuntimeClass)
	if o.RuntimeClass != "" && (len(o.RuntimeClass) > 253 || !dnsSubdomain().MatchString(o.RuntimeClass)) {
		return fmt.Errorf("--kube-runtime-class %q is not a RuntimeClass name", o.RuntimeClass)
	}
	o.PullSecrets = list(getenv(env, EnvPullSecrets))
	for _, s := range o.PullSecrets {
		if len(s) > 253 || !dnsSubdomain().MatchString(s) {
			return fmt.Errorf("--kube-pull-secret %q is not a Secret name", s)
		}
	}
	var err error
	if o.NodeSelector, err = ParseNodeSelector(getenv(env, EnvNodeSelector)); err != nil {
		return err
	}
	if o.Tolerations, err = ParseTolerations(getenv(env, EnvTolerations)); err != nil {
		return err
	}
	for _, q := range []struct {
		dst       *string
		env, flag string
	}{
		{&o.CPURequest, EnvCPURequest, "--kube-cpu-request"}, {&o.CPULimit, EnvCPULimit, "--kube-cpu-limit"},
		{&o.StorageRequest, EnvStorageRequest, "--kube-ephemeral-storage-request"}, {&o.StorageLimit, EnvStorageLimit, "--kube-ephemeral-storage-limit"},
	} {
		v := getenv(env, q.env)
		if v != "" && !quantity().MatchString(v) {
			return fmt.Errorf("%s %q is not a Kubernetes quantity (500m, 2, 1Gi)", q.flag, v)
		}
		*q.dst = v
	}
	if v := getenv(env, EnvAgentDeadline); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s < 0 {
			return fmt.Errorf("%s %q: want whole seconds", EnvAgentDeadline, v)
		}
		o.ActiveDeadline = ActiveDeadline(time.Duration(s) * time.Second)
	}
	return nil
}

// ActiveDeadline is the pod's activeDeadlineSeconds for an agent whose
// deadline and grace add up to agent (0: none): a backstop the cluster
// enforces should the watcher's own deadline fail. It counts from the
// pod's start, so it leaves the start (image, init container) its
// StartTimeout and a minute more.
func ActiveDeadline(agent time.Duration) int64 {
	if agent <= 0 {
		return 0
	}
	return int64(math.Ceil((agent + StartTimeout + time.Minute).Seconds()))
}

var dnsSubdomain = lazyRegexp(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
