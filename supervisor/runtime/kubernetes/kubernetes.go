// Package kubernetes is the Kubernetes runtime: a box is a pod whose
// one container runs the watcher as PID 1 in the unix control mode, and
// the control stream rides an exec session of the watcher's relay
// (pods/exec over WebSocket); the container's log is the agent's output. It talks to the API server with
// its own small client (client.go: net/http, a kubeconfig read as
// kubectl reads it, the attach with gorilla/websocket).
//
// The runtime's settings come from the engine environment, so that
// exec, reconcile, ls and doctor see the same cluster: KUBECONFIG (else
// ~/.kube/config, else the pod's service account),
// DEATHWATCH_K8S_CONTEXT and DEATHWATCH_K8S_NAMESPACE (the CLI's
// --kube-context and --kube-namespace), DEATHWATCH_K8S_NODE (for a
// cluster without a scheduler), DEATHWATCH_K8S_PULL_NEVER=1,
// DEATHWATCH_K8S_WATCHER_IMAGE (an image whose watcher an init
// container copies in, when the box's image carries none),
// DEATHWATCH_K8S_USER_NAMESPACE=1, DEATHWATCH_K8S_POD_SECURITY
// (podsecurity.go) and the pod knobs of knobs.go (exec's other --kube-*
// flags).
//
//	Probe     GET /version; a SelfSubjectAccessReview per verb the
//	          runtime needs (pods: create, get, list, delete;
//	          pods/exec: create, get); a dry run of a box's pod
//	          (admission.go: Pod Security, quotas), all at once
//	Prepare   CheckBox: the refusals, one line each; the namespace and
//	          the server into Box.State (reconcile deletes only there)
//	Create    POST the pod BuildPod makes
//	Start     wait for the box container to run, exec the relay
//	Remove    DELETE with grace period 0 (a pod that is gone is fine)
//	List      the namespace's pods with the instance label
//	Exists    GET the pod
//	HostPID   the container's PID 1 on this host when the kubelet is
//	          local (its containerd id in /proc), else 0
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// Name is what --runtime takes.
const Name = "kubernetes"

// State keys the runtime journals.
const (
	stateNamespace = "kubernetes.namespace"
	stateServer    = "kubernetes.server"
)

// StartTimeout bounds the wait for the box container to run (image,
// init container, sandbox).
var StartTimeout = 2 * time.Minute

// The descriptor. Bounds: a killed supervisor's attach ends with its
// TCP connection; the kubelet closes the container's stdin and the
// watcher kills the box; removal is reconcile's DELETE with grace 0.
// The bounds are well above what make bench and prove-deathwatch see on
// the test cluster, to leave room for a remote API server and a busy
// kubelet.
func init() {
	supervisor.Register(supervisor.Descriptor{
		Name:     Name,
		Daemon:   false,
		AutoRank: 0, // never picked by auto: a cluster is chosen on purpose
		Bounds:   supervisor.Bounds{Dead: 2 * time.Second, Removed: 20 * time.Second},
		Installed: func(env []string) error {
			_, err := LoadCluster(env)
			return err
		},
		New: func(c supervisor.RuntimeConfig) (supervisor.Runtime, error) {
			return &Runtime{env: c.EngineEnv, stderr: c.Stderr, log: c.Log}, nil
		},
	})
}

// Runtime is the Kubernetes runtime.
type Runtime struct {
	env    []string
	stderr io.Writer
	log    *slog.Logger

	cluster *Cluster
	client  *Client
}

// Name implements supervisor.Runtime.
func (r *Runtime) Name() string { return Name }

func (r *Runtime) connect() (*Client, error) {
	if r.client != nil {
		return r.client, nil
	}
	c, err := LoadCluster(r.env)
	if err != nil {
		return nil, err
	}
	k, err := NewClient(c, r.env)
	if err != nil {
		return nil, err
	}
	r.cluster, r.client = c, k
	return k, nil
}

// unreachable is connect's failure: the cluster is out of reach (an
// engine error) unless err carries its own code, as a --kube-context
// that names no context does.
func unreachable(err error) error {
	return exitcode.With(exitcode.Of(err, shared.ExitEngine), fmt.Errorf("kubernetes: %w", err))
}

// options are the pod options the environment sets.
func (r *Runtime) options() (Options, error) {
	ns := getenv(r.env, EnvNamespace)
	if r.cluster != nil {
		ns = r.cluster.Namespace
	}
	if ns == "" {
		ns = "default"
	}
	o := Options{
		Namespace:     ns,
		Node:          getenv(r.env, EnvNode),
		PullNever:     getenv(r.env, EnvPullNever) == "1",
		WatcherImage:  getenv(r.env, EnvWatcherImage),
		UserNamespace: getenv(r.env, EnvUserNamespace) == "1",
	}
	if err := knobs(r.env, &o); err != nil {
		return o, exitcode.Usage("kubernetes: %w", err)
	}
	var err error
	if o.PodSecurity, err = parsePodSecurity(getenv(r.env, EnvPodSecurity)); err != nil {
		return o, exitcode.Usage("kubernetes: %w", err)
	}
	return o, nil
}

// Needed is what the runtime must be allowed in its namespace: the
// minimal Role (rbac.go) grants exactly this.
var Needed = []struct{ Verb, Resource, Sub string }{
	{"create", "pods", ""}, {"get", "pods", ""}, {"list", "pods", ""}, {"delete", "pods", ""},
	{"create", "pods", "exec"}, {"get", "pods", "exec"}, // the WebSocket upgrade is a GET
}

// Probe reaches the API server, checks RBAC and asks admission about a
// box's pod (a server-side dry run): the version, the access reviews
// and the dry run go at once, in the time of one round trip.
func (r *Runtime) Probe(ctx context.Context) (supervisor.Info, error) {
	info := supervisor.Info{Runtime: Name}
	k, err := r.connect()
	if err != nil {
		info.Detail = err.Error()
		return info, unreachable(err)
	}
	o, err := r.options()
	if err != nil {
		info.Detail = err.Error()
		return info, err
	}
	ns := o.Namespace
	var (
		wg      sync.WaitGroup
		version string
		verr    error
		allowed = make([]bool, len(Needed))
		aerrs   = make([]error, len(Needed))
		dryErr  error
		level   string
		lerr    error
	)
	wg.Add(3 + len(Needed))
	go func() { defer wg.Done(); version, verr = k.Version(ctx) }()
	go func() { defer wg.Done(); dryErr = k.Do(ctx, DryRunPodRequest(probePod(o)), nil) }()
	go func() { defer wg.Done(); level, lerr = k.EnforcedLevel(ctx, ns) }()
	for i, n := range Needed {
		go func() { defer wg.Done(); allowed[i], aerrs[i] = k.Allowed(ctx, ns, n.Verb, n.Resource, n.Sub) }()
	}
	wg.Wait()
	if verr != nil {
		info.Detail = fmt.Sprintf("API server %s unreachable: %v", r.cluster.Server, verr)
		return info, exitcode.Engine("kubernetes: API server %s unreachable: %w", r.cluster.Server, verr)
	}
	info.Version = version
	var denied []string
	for i, n := range Needed {
		if aerrs[i] != nil {
			info.Detail = fmt.Sprintf("access review: %v", aerrs[i])
			return info, exitcode.Engine("kubernetes: access review: %w", aerrs[i])
		}
		if !allowed[i] {
			res := n.Resource
			if n.Sub != "" {
				res += "/" + n.Sub
			}
			denied = append(denied, n.Verb+" "+res)
		}
	}
	if len(denied) > 0 {
		info.Detail = fmt.Sprintf("RBAC denies %s in namespace %s: apply `supervisor kubernetes rbac --namespace %s --subject NAME` for this identity", strings.Join(denied, ", "), ns, ns)
		return info, exitcode.Engine("kubernetes: %s", info.Detail)
	}
	if err := admissionProbe(dryErr, ns, o.PodSecurity); err != nil {
		info.Detail = err.Error()
		return info, err
	}
	// The boundary is the node's container runtime, not this host's
	// root: a daemon-less, "rootless" runtime from this host's view.
	info.Present, info.Rootless = true, true
	info.Detail = r.describe(o, level, lerr)
	return info, nil
}

// describe is doctor's line on where boxes go and what admits them:
// the namespace's Pod Security level (level, read with lerr) and the
// mode boxes use.
func (r *Runtime) describe(o Options, level string, lerr error) string {
	ctx := r.cluster.Context
	if ctx == "" {
		ctx = "the pod's service account"
	} else {
		ctx = "context " + ctx
	}
	users := "the node's user namespace (hostUsers: true; --kube-user-namespace gives each box its own)"
	if o.UserNamespace {
		users = "a user namespace of its own (hostUsers: false)"
	}
	return fmt.Sprintf("%s, server %s: %s (a dry run of a box's pod passes); %s", ctx, r.cluster.Server, levelLine(o.Namespace, level, lerr, o.PodSecurity), users)
}

// Prepare refuses what a pod cannot honour and journals where the pod
// will be.
func (r *Runtime) Prepare(ctx context.Context, b *supervisor.Box) error {
	if _, err := r.connect(); err != nil {
		return unreachable(err)
	}
	o, err := r.options()
	if err != nil {
		return err
	}
	if err := CheckBox(b, o); err != nil {
		return exitcode.Refused("kubernetes: %w", err)
	}
	if b.Image == "" {
		return exitcode.Usage("--runtime kubernetes needs --image")
	}
	b.State[stateNamespace] = o.Namespace
	b.State[stateServer] = r.cluster.Server
	return nil
}

// CheckImage checks nothing before the pod exists: the only listing a
// client can read, the node's status, trails the node's container
// runtime (an image imported a moment ago is missing from it until the
// kubelet's next status update, and it names at most 50 images), so a
// refusal from it would turn away images that are there. An image the
// pod cannot get shows in its container's waiting reason, which Start
// turns into exit 242 (exitcode.Image) and the pod is removed.
func (r *Runtime) CheckImage(ctx context.Context, image string) error { return nil }

// Admit refuses what the pod cannot honour (supervisor.Admitter): its
// limits (CheckLimits).
func (r *Runtime) Admit(_ context.Context, b *supervisor.Box) error {
	return r.CheckLimits(b.Memory, b.PidsLimit)
}

// CheckLimits refuses a pids limit: a pod spec has none (the kubelet's
// podPidsLimit is node-wide). Memory maps to the container's limit.
func (r *Runtime) CheckLimits(_, pids int64) error {
	if pids > 0 {
		return exitcode.Refused("kubernetes: --pids-limit cannot be honoured: a pod spec has no process limit (the kubelet's podPidsLimit is node-wide); drop it")
	}
	return nil
}

// namespace is where b's pod is: journaled, else the configured one.
func (r *Runtime) namespace(b *supervisor.Box) string {
	if ns := b.State[stateNamespace]; ns != "" {
		return ns
	}
	o, _ := r.options() // the namespace is there whatever the knobs say
	return o.Namespace
}

// Create makes the pod.
func (r *Runtime) Create(ctx context.Context, b *supervisor.Box) error {
	k, err := r.connect()
	if err != nil {
		return exitcode.Engine("kubernetes: %w", err)
	}
	o, err := r.options()
	if err != nil {
		return err
	}
	o.Namespace = r.namespace(b)
	if err := k.Do(ctx, CreatePodRequest(BuildPod(b, o)), nil); err != nil {
		if r := createRefusal(err, o.Namespace, o.PodSecurity); r != nil {
			return r
		}
		return exitcode.Setup("create pod %s/%s: %w", o.Namespace, b.Name, err)
	}
	return nil
}

// Start waits until the box container runs, then opens the control
// stream: an exec session of the relay to the watcher's socket, which
// takes this one connection only.
func (r *Runtime) Start(ctx context.Context, b *supervisor.Box) (*supervisor.Started, error) {
	k, err := r.connect()
	if err != nil {
		return nil, exitcode.Engine("kubernetes: %w", err)
	}
	ns := r.namespace(b)
	wctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	if err := waitRunning(wctx, k, ns, b.Name); err != nil {
		if errors.Is(err, errNoImage) {
			return nil, exitcode.Image("pod %s/%s: %w: import the image into the node's container runtime, or allow pulls", ns, b.Name, err)
		}
		return nil, exitcode.Setup("pod %s/%s: %w", ns, b.Name, err)
	}
	var logf func(string, ...any)
	if r.log != nil {
		logf = func(msg string, args ...any) { r.log.Debug(msg, args...) }
	}
	s, err := k.Exec(ctx, ns, b.Name, ContainerName, RelayCommand(b), r.stderr, logf)
	if err != nil {
		return nil, exitcode.Setup("%w", err)
	}
	return &supervisor.Started{Control: s, Wait: s.Wait, Kill: s.Kill}, nil
}

// waitRunning polls the pod until its box container runs; a pod that
// failed, or a container that waits for a reason that does not pass,
// is an error naming the reason.
func waitRunning(ctx context.Context, k *Client, ns, name string) error {
	tick := 50 * time.Millisecond
	for {
		p, err := k.GetPod(ctx, ns, name)
		if err != nil {
			return err
		}
		if done, err := runningState(p); done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("its container did not start in %v (phase %s)", StartTimeout, p.Status.Phase)
		case <-time.After(tick):
		}
		tick = min(tick*2, 500*time.Millisecond)
	}
}

// stuck reports whether a waiting reason will not pass by itself; the
// image ones (imageReason) are errNoImage. Switches, not maps: nothing
// is built at start for a runtime that may not be picked.
func stuck(reason string) bool {
	switch reason {
	case "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff":
		return true
	}
	return imageReason(reason)
}

// imageReason reports whether a waiting reason says the image cannot be had.
func imageReason(reason string) bool {
	switch reason {
	case "ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull", "InvalidImageName":
		return true
	}
	return false
}

// errNoImage: the pod's container cannot get its image.
var errNoImage = errors.New("the image cannot be had")

// runningState reads a pod's status: done with nil once the box
// container runs, done with an error when it never will.
func runningState(p *Pod) (bool, error) {
	if p.Metadata.DeletionTimestamp != nil {
		return true, errors.New("is being deleted")
	}
	for _, cs := range append(append([]ContainerStatus(nil), p.Status.InitStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && stuck(w.Reason) {
			if imageReason(w.Reason) {
				return true, fmt.Errorf("%w: container %s: %s: %s", errNoImage, cs.Name, w.Reason, w.Message)
			}
			return true, fmt.Errorf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
		}
		if t := cs.State.Terminated; t != nil && (cs.Name == ContainerName || t.ExitCode != 0) {
			return true, fmt.Errorf("container %s exited (%s, code %d) before the attach: %s", cs.Name, t.Reason, t.ExitCode, t.Message)
		}
		if cs.Name == ContainerName && cs.State.Running != nil {
			return true, nil
		}
	}
	switch p.Status.Phase {
	case "Failed", "Succeeded":
		return true, fmt.Errorf("is %s before the attach: %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	return false, nil
}

// Remove deletes the pod with grace period 0. A journaled server other
// than the configured one is an error: the pod is not this cluster's
// to delete.
func (r *Runtime) Remove(ctx context.Context, b *supervisor.Box) error {
	k, err := r.connect()
	if err != nil {
		return err
	}
	if s := b.State[stateServer]; s != "" && s != r.cluster.Server {
		return fmt.Errorf("pod %s is on cluster %s, the kubeconfig names %s: point KUBECONFIG at that cluster", b.Name, s, r.cluster.Server)
	}
	return k.DeletePod(ctx, r.namespace(b), b.Name)
}

// List returns the configured namespace's pods with instance's label.
func (r *Runtime) List(ctx context.Context, instance string) ([]supervisor.Listed, error) {
	k, err := r.connect()
	if err != nil {
		return nil, err
	}
	o, _ := r.options()
	pods, err := k.ListPods(ctx, o.Namespace, shared.LabelInstance, instance)
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	out := make([]supervisor.Listed, 0, len(pods))
	for _, p := range pods {
		out = append(out, supervisor.Listed{Name: p.Metadata.Name, Labels: p.Metadata.Labels,
			Running: p.Status.Phase == "Pending" || p.Status.Phase == "Running"})
	}
	return out, nil
}

// Exists reports whether the pod is there.
func (r *Runtime) Exists(ctx context.Context, b *supervisor.Box) (bool, error) {
	k, err := r.connect()
	if err != nil {
		return false, err
	}
	_, err = k.GetPod(ctx, r.namespace(b), b.Name)
	switch {
	case IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// HostPID finds the box container's PID 1 on this host (a local
// kubelet), else 0.
func (r *Runtime) HostPID(ctx context.Context, b *supervisor.Box) (int, error) {
	k, err := r.connect()
	if err != nil {
		return 0, err
	}
	p, err := k.GetPod(ctx, r.namespace(b), b.Name)
	if IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == ContainerName && cs.State.Running != nil {
			_, id, _ := strings.Cut(cs.ContainerID, "://")
			return localPID(id), nil
		}
	}
	return 0, nil
}

var (
	_ supervisor.Preparer     = (*Runtime)(nil)
	_ supervisor.Admitter     = (*Runtime)(nil)
	_ supervisor.ImageChecker = (*Runtime)(nil)
)
