package kubernetes

// The pod a box is: a pure builder from the box and the runtime's
// options, so every field of the request body has a table test.

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"deathwatch/shared"
	"deathwatch/supervisor"
)

// ContainerName is the box's container (the watcher is its PID 1).
const ContainerName = "box"

// The init container that copies the watcher from a watcher image, and
// where it puts it (an emptyDir mounted read-only into the box).
const (
	initContainerName = "watcher"
	watcherVolume     = "dw"
	watcherDir        = "/dw"
	// WatcherImagePath is where a watcher image carries the watcher.
	WatcherImagePath = "/usr/local/bin/watcher"
)

// The control stream's socket: the watcher listens on it in the unix
// control mode, in a folder it makes 0700 inside a small memory-backed
// emptyDir, and the supervisor's exec session runs the relay to it
// (RelayCommand), so that the container's stdout and stderr are the
// agent's output (kubectl logs), not frames.
const (
	controlVolume = "control"
	controlMount  = "/run/deathwatch"
	// ControlSocket is the watcher's socket in the box container.
	ControlSocket = controlMount + "/ctl/control.sock"
)

// RelayCommand is the exec session's command for box b: the watcher's
// relay to its socket.
func RelayCommand(b *supervisor.Box) []string {
	return []string{watcherPath(b), "relay", ControlSocket}
}

// watcherPath is where the box container has the watcher.
func watcherPath(b *supervisor.Box) string {
	if b.WatcherInImage == "" {
		return supervisor.WatcherMountPoint
	}
	return b.WatcherInImage
}

// The capabilities the watcher needs and nothing else: the docker
// runtime's set (SETUID/SETGID/SETPCAP to become the agent and empty
// its bounding set, KILL to signal it, CHOWN for the agent's pty).
var watcherCaps = []string{"SETUID", "SETGID", "SETPCAP", "KILL", "CHOWN"}

// Options are the runtime's own settings for the pods it makes.
type Options struct {
	Namespace     string
	Node          string // spec.nodeName; "" lets the scheduler pick
	PullNever     bool   // imagePullPolicy: Never
	WatcherImage  string // copy the watcher from this image (when the box has no WatcherInImage)
	UserNamespace bool   // hostUsers: false (the node's runtime must support user-namespaced pods)
	PodSecurity   string // the pod's Pod Security level: PodSecurityBaseline ("": it) or PodSecurityRestricted

	RuntimeClass   string            // spec.runtimeClassName
	PullSecrets    []string          // spec.imagePullSecrets
	NodeSelector   map[string]string // spec.nodeSelector
	Tolerations    []Toleration      // spec.tolerations
	CPURequest     string            // the box container's requests.cpu
	CPULimit       string            // limits.cpu
	StorageRequest string            // requests.ephemeral-storage (default defaultStorageRequest)
	StorageLimit   string            // limits.ephemeral-storage (default DefaultEphemeralStorage)
	ActiveDeadline int64             // spec.activeDeadlineSeconds; 0: none
}

// The pod's default bounds beside the box's memory: its writable
// storage (container log, any writable layer) and the bounded /tmp and
// /dev/shm of every runtime, memory-backed.
const (
	DefaultEphemeralStorage = "1Gi"
	defaultMemoryRequest    = "64Mi"
	defaultStorageRequest   = "64Mi"
	tmpVolume               = "tmp"
	shmVolume               = "shm"
)

// The pod as the API takes it: only the fields the runtime sets.
type (
	Pod struct {
		APIVersion string    `json:"apiVersion"`
		Kind       string    `json:"kind"`
		Metadata   Meta      `json:"metadata"`
		Spec       PodSpec   `json:"spec"`
		Status     PodStatus `json:"status,omitempty"`
	}
	Meta struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace,omitempty"`
		Labels            map[string]string `json:"labels,omitempty"`
		Annotations       map[string]string `json:"annotations,omitempty"`
		DeletionTimestamp *string           `json:"deletionTimestamp,omitempty"`
	}
	PodSpec struct {
		RestartPolicy                 string            `json:"restartPolicy"`
		NodeName                      string            `json:"nodeName,omitempty"`
		NodeSelector                  map[string]string `json:"nodeSelector,omitempty"`
		Tolerations                   []Toleration      `json:"tolerations,omitempty"`
		RuntimeClassName              string            `json:"runtimeClassName,omitempty"`
		ImagePullSecrets              []LocalRef        `json:"imagePullSecrets,omitempty"`
		ActiveDeadlineSeconds         *int64            `json:"activeDeadlineSeconds,omitempty"`
		HostNetwork                   bool              `json:"hostNetwork"`
		HostPID                       bool              `json:"hostPID"`
		HostIPC                       bool              `json:"hostIPC"`
		HostUsers                     *bool             `json:"hostUsers,omitempty"`
		AutomountServiceAccountToken  *bool             `json:"automountServiceAccountToken"`
		EnableServiceLinks            *bool             `json:"enableServiceLinks"`
		TerminationGracePeriodSeconds *int64            `json:"terminationGracePeriodSeconds"`
		SecurityContext               *PodSecurity      `json:"securityContext,omitempty"`
		InitContainers                []Container       `json:"initContainers,omitempty"`
		Containers                    []Container       `json:"containers"`
		Volumes                       []Volume          `json:"volumes,omitempty"`
	}
	PodSecurity struct {
		SeccompProfile *Seccomp `json:"seccompProfile,omitempty"`
	}
	Seccomp struct {
		Type string `json:"type"`
	}
	Container struct {
		Name            string        `json:"name"`
		Image           string        `json:"image"`
		ImagePullPolicy string        `json:"imagePullPolicy,omitempty"`
		Command         []string      `json:"command"`
		Args            []string      `json:"args,omitempty"`
		Env             []EnvVar      `json:"env,omitempty"`
		WorkingDir      string        `json:"workingDir,omitempty"`
		Stdin           bool          `json:"stdin,omitempty"`
		StdinOnce       bool          `json:"stdinOnce,omitempty"`
		TTY             bool          `json:"tty"`
		SecurityContext *Security     `json:"securityContext,omitempty"`
		Resources       *Resources    `json:"resources,omitempty"`
		VolumeMounts    []VolumeMount `json:"volumeMounts,omitempty"`
	}
	LocalRef struct {
		Name string `json:"name"`
	}
	EnvVar struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	Security struct {
		RunAsUser                *int64        `json:"runAsUser,omitempty"`
		RunAsGroup               *int64        `json:"runAsGroup,omitempty"`
		RunAsNonRoot             *bool         `json:"runAsNonRoot,omitempty"`
		AllowPrivilegeEscalation *bool         `json:"allowPrivilegeEscalation"`
		Privileged               *bool         `json:"privileged"`
		Capabilities             *Capabilities `json:"capabilities,omitempty"`
		SeccompProfile           *Seccomp      `json:"seccompProfile,omitempty"`
		ReadOnlyRootFilesystem   *bool         `json:"readOnlyRootFilesystem,omitempty"`
	}
	Capabilities struct {
		Add  []string `json:"add,omitempty"`
		Drop []string `json:"drop"`
	}
	Resources struct {
		Limits   map[string]string `json:"limits,omitempty"`
		Requests map[string]string `json:"requests,omitempty"`
	}
	Volume struct {
		Name     string    `json:"name"`
		EmptyDir *EmptyDir `json:"emptyDir,omitempty"`
	}
	EmptyDir struct {
		Medium    string `json:"medium,omitempty"`
		SizeLimit string `json:"sizeLimit,omitempty"`
	}
	VolumeMount struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly,omitempty"`
	}
	PodStatus struct {
		Phase             string            `json:"phase,omitempty"`
		Reason            string            `json:"reason,omitempty"`
		Message           string            `json:"message,omitempty"`
		ContainerStatuses []ContainerStatus `json:"containerStatuses,omitempty"`
		InitStatuses      []ContainerStatus `json:"initContainerStatuses,omitempty"`
	}
	ContainerStatus struct {
		Name        string `json:"name"`
		ContainerID string `json:"containerID,omitempty"`
		State       struct {
			Waiting    *StateDetail `json:"waiting,omitempty"`
			Running    *StateDetail `json:"running,omitempty"`
			Terminated *StateDetail `json:"terminated,omitempty"`
		} `json:"state"`
	}
	StateDetail struct {
		Reason   string `json:"reason,omitempty"`
		Message  string `json:"message,omitempty"`
		ExitCode int    `json:"exitCode,omitempty"`
	}
)

// The patterns a pod's names and labels must match, compiled on first
// use: at package init they would cost every start of the supervisor
// binary, a native launch included.
var (
	dnsLabel   = lazyRegexp(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	labelValue = lazyRegexp(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
	labelName  = lazyRegexp(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

func lazyRegexp(pattern string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(pattern) })
}

// CheckBox refuses, with one line each, what a pod cannot carry or
// honour: a name that is not a DNS label, labels Kubernetes would
// reject, host mounts, an explicit network mode, and a watcher the
// pod cannot get.
func CheckBox(b *supervisor.Box, o Options) error {
	if len(b.Name) > 63 || !dnsLabel().MatchString(b.Name) {
		return fmt.Errorf("box name %q is not a Kubernetes name (lower-case letters, digits and '-', at most 63): pick another --name", b.Name)
	}
	if o.Namespace == "" || len(o.Namespace) > 63 || !dnsLabel().MatchString(o.Namespace) {
		return fmt.Errorf("namespace %q is not a Kubernetes namespace name: pass another --kube-namespace", o.Namespace)
	}
	keys := sortedKeys(b.Labels)
	for _, k := range keys {
		v := b.Labels[k]
		if len(k) > 253 || !labelName().MatchString(k) {
			return fmt.Errorf("label key %q is not a Kubernetes label key: rename it", k)
		}
		if len(v) > 63 || !labelValue().MatchString(v) {
			return fmt.Errorf("label %s=%q: a Kubernetes label value is at most 63 letters, digits, '-', '_', '.' (starting and ending alphanumeric)", k, v)
		}
	}
	if len(b.Mounts) > 0 {
		return fmt.Errorf("--mount cannot be honoured: a pod cannot bind the supervisor host's folders; drop --mount")
	}
	if b.NetworkSet && b.Network != "bridge" {
		return fmt.Errorf("--network %s cannot be honoured: a pod always has the cluster's pod network (its NetworkPolicy decides its reach); drop --network or pass --network bridge", b.Network)
	}
	if uid, gid := agentIDs(b); o.PodSecurity == PodSecurityRestricted && (uid == 0 || gid == 0) {
		return fmt.Errorf("--kube-pod-security restricted runs the box's container as the agent's ids, and restricted refuses root: pick a --user other than 0")
	}
	if b.WatcherInImage == "" && o.WatcherImage == "" {
		return fmt.Errorf("the host's watcher cannot be mounted into a pod: pass --watcher-in-image PATH (a watcher in the image) or --kube-watcher-image IMAGE (a watcher image)")
	}
	return nil
}

// The Pod Security levels a box's pod is built to pass.
const (
	PodSecurityBaseline   = "baseline"
	PodSecurityRestricted = "restricted"
)

// BuildPod is the pod for box b: the watcher as PID 1 in the unix
// control mode (ControlSocket, gated by the box's nonce), never
// restarted, its stdout and stderr the agent's output; the box's labels as labels and
// annotations; root in the container with only the watcher's
// capabilities, a read-only root (unless ReadWriteRoot) with bounded
// memory-backed /tmp and /dev/shm, no host namespaces, no service
// account token, memory and ephemeral-storage bounds. Nothing secret:
// the agent's environment travels in the spec frame alone.
//
// The pod meets Pod Security baseline, not restricted, which allows no
// capability but NET_BIND_SERVICE even with hostUsers: false: the
// watcher needs SETUID, SETGID and SETPCAP to start the agent as another
// uid with an empty bounding set, KILL to signal it and CHOWN for its pty.
// With PodSecurity restricted the box container runs as the agent's
// ids with no capability, and the watcher in restricted mode
// (--restricted) keeps the agent at that uid behind its own walls.
func BuildPod(b *supervisor.Box, o Options) Pod {
	root, no, yes := int64(0), false, true
	pull := ""
	if o.PullNever {
		pull = "Never"
	}
	sec := func(caps []string, user, group int64) *Security {
		return &Security{
			RunAsUser: &user, RunAsGroup: &group, RunAsNonRoot: ptr(user != 0),
			AllowPrivilegeEscalation: &no, Privileged: &no,
			Capabilities:           &Capabilities{Drop: []string{"ALL"}, Add: caps},
			SeccompProfile:         &Seccomp{Type: "RuntimeDefault"},
			ReadOnlyRootFilesystem: &yes,
		}
	}
	c := Container{
		Name: ContainerName, Image: b.Image, ImagePullPolicy: pull,
		Command:         []string{watcherPath(b), "--control=unix:" + ControlSocket, "--nonce=" + b.Nonce},
		Env:             watcherEnv(),
		WorkingDir:      b.Workdir,
		TTY:             false,
		SecurityContext: sec(append([]string(nil), watcherCaps...), root, root),
	}
	if o.PodSecurity == PodSecurityRestricted {
		uid, gid := agentIDs(b)
		c.SecurityContext = sec(nil, uid, gid)
		c.Command = append(c.Command, "--restricted")
	}
	// An asked-for memory bound is also the request; the default one
	// is a limit with a small request, so that it fits any node.
	c.Resources = &Resources{
		Limits:   map[string]string{"memory": strconv.FormatInt(supervisor.DefaultMemory, 10), "ephemeral-storage": DefaultEphemeralStorage},
		Requests: map[string]string{"memory": defaultMemoryRequest, "ephemeral-storage": defaultStorageRequest},
	}
	if b.Memory > 0 {
		m := strconv.FormatInt(b.Memory, 10)
		c.Resources.Limits["memory"], c.Resources.Requests["memory"] = m, m
	}
	for _, q := range []struct {
		m         map[string]string
		name, val string
	}{
		{c.Resources.Requests, "cpu", o.CPURequest}, {c.Resources.Limits, "cpu", o.CPULimit},
		{c.Resources.Requests, "ephemeral-storage", o.StorageRequest}, {c.Resources.Limits, "ephemeral-storage", o.StorageLimit},
	} {
		if q.val != "" {
			q.m[q.name] = q.val
		}
	}
	p := Pod{
		APIVersion: "v1", Kind: "Pod",
		Metadata: Meta{Name: b.Name, Namespace: o.Namespace, Labels: copyMap(b.Labels), Annotations: copyMap(b.Labels)},
		Spec: PodSpec{
			RestartPolicy:                 "Never",
			NodeName:                      o.Node,
			NodeSelector:                  copyMapOrNil(o.NodeSelector),
			Tolerations:                   append([]Toleration(nil), o.Tolerations...),
			RuntimeClassName:              o.RuntimeClass,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: ptr(int64(0)),
			SecurityContext:               &PodSecurity{SeccompProfile: &Seccomp{Type: "RuntimeDefault"}},
		},
	}
	if o.UserNamespace {
		p.Spec.HostUsers = &no
	}
	for _, s := range o.PullSecrets {
		p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, LocalRef{Name: s})
	}
	if o.ActiveDeadline > 0 {
		p.Spec.ActiveDeadlineSeconds = ptr(o.ActiveDeadline)
	}
	if b.ReadWriteRoot {
		c.SecurityContext.ReadOnlyRootFilesystem = &no
	} else {
		p.Spec.Volumes = append(p.Spec.Volumes, Volume{Name: tmpVolume, EmptyDir: &EmptyDir{Medium: "Memory", SizeLimit: strconv.Itoa(supervisor.TmpfsBytes)}})
		c.VolumeMounts = append(c.VolumeMounts, VolumeMount{Name: tmpVolume, MountPath: "/tmp"})
	}
	p.Spec.Volumes = append(p.Spec.Volumes, Volume{Name: shmVolume, EmptyDir: &EmptyDir{Medium: "Memory", SizeLimit: strconv.Itoa(supervisor.ShmBytes)}})
	c.VolumeMounts = append(c.VolumeMounts, VolumeMount{Name: shmVolume, MountPath: "/dev/shm"})
	p.Spec.Volumes = append(p.Spec.Volumes, Volume{Name: controlVolume, EmptyDir: &EmptyDir{Medium: "Memory", SizeLimit: "1Mi"}})
	c.VolumeMounts = append(c.VolumeMounts, VolumeMount{Name: controlVolume, MountPath: controlMount})
	if b.WatcherInImage == "" {
		// The watcher image's busybox cp puts the watcher into an
		// emptyDir the box mounts read-only; the copy runs as nobody
		// with no capabilities.
		nobody := int64(65534)
		p.Spec.Volumes = append(p.Spec.Volumes, Volume{Name: watcherVolume, EmptyDir: &EmptyDir{SizeLimit: "64Mi"}})
		p.Spec.InitContainers = []Container{{
			Name: initContainerName, Image: o.WatcherImage, ImagePullPolicy: pull,
			Command:         []string{"cp", WatcherImagePath, watcherDir + "/watcher"},
			SecurityContext: sec(nil, nobody, nobody),
			Resources:       &Resources{Limits: map[string]string{"memory": "64Mi", "ephemeral-storage": "64Mi"}},
			VolumeMounts:    []VolumeMount{{Name: watcherVolume, MountPath: watcherDir}},
		}}
		c.VolumeMounts = append(c.VolumeMounts, VolumeMount{Name: watcherVolume, MountPath: watcherDir, ReadOnly: true})
	}
	p.Spec.Containers = []Container{c}
	return p
}

// agentIDs are the ids the agent runs as: the box's, else the
// defaults.
func agentIDs(b *supervisor.Box) (uid, gid int64) {
	if b.AgentUID == 0 && b.AgentGID == 0 {
		return shared.DefaultAgentUID, shared.DefaultAgentGID
	}
	return int64(b.AgentUID), int64(b.AgentGID)
}

func ptr[T any](v T) *T { return &v }

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func copyMapOrNil(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return copyMap(m)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// watcherEnv is supervisor.WatcherEnv as the pod's container names it.
func watcherEnv() []EnvVar {
	env := make([]EnvVar, 0, len(supervisor.WatcherEnv))
	for _, e := range supervisor.WatcherEnv {
		name, value, _ := strings.Cut(e, "=")
		env = append(env, EnvVar{Name: name, Value: value})
	}
	return env
}
