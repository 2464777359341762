package kubernetes

// What the cluster's admission says of a box's pod, and the one line
// (with its exit code) each refusal gets: Pod Security (243, with the
// level the namespace needs and why), a ResourceQuota or LimitRange
// that the pod does not fit (243, with the flags that fit it), a
// missing namespace (240: a flag or the context names it), RBAC (241:
// this identity cannot use the runtime, as a daemon socket it may not
// open), a RuntimeClass the cluster does not have and a pod the flags
// make invalid (240). The probe asks with a server-side dry run of a pod built as
// every box's is, before anything exists; Create meets the same
// answers.

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// DryRunPodRequest is CreatePodRequest as a server-side dry run: every
// admission step runs, nothing is stored.
func DryRunPodRequest(p Pod) Request {
	r := CreatePodRequest(p)
	r.Query = url.Values{"dryRun": {"All"}}
	return r
}

// probePodName names the dry-run pod (never stored).
const probePodName = "deathwatch-admission-probe"

// probePod is the pod of a box with the runtime's options and no flag
// of its own: what admission sees of every box.
func probePod(o Options) Pod {
	b := &supervisor.Box{Name: probePodName, Image: "deathwatch.invalid/probe", WatcherInImage: WatcherImagePath}
	if o.WatcherImage != "" {
		b.WatcherInImage = ""
	}
	return BuildPod(b, o)
}

var podSecurityLevel = lazyRegexp(`violates PodSecurity "([a-z]+)(:[^"]*)?"`)

// createRefusal is the error for an answer of the API server to a
// create (or its dry run) of a pod in ns built for Pod Security mode,
// or nil when err is none of the refusals this file names.
func createRefusal(err error, ns, mode string) error {
	var a *APIError
	if !errors.As(err, &a) {
		return nil
	}
	switch {
	case a.Code == http.StatusForbidden && strings.Contains(a.Message, "violates PodSecurity"):
		level := "restricted"
		if m := podSecurityLevel().FindStringSubmatch(a.Message); m != nil {
			level = m[1]
		}
		if mode == PodSecurityRestricted {
			return exitcode.Refused("kubernetes: namespace %s enforces Pod Security %q, which refuses even a --kube-pod-security restricted pod; run the boxes in a namespace labelled pod-security.kubernetes.io/enforce=restricted or baseline (the admission said: %w)", ns, level, err)
		}
		return exitcode.Refused("kubernetes: namespace %s enforces Pod Security %q, and a box needs baseline: its watcher keeps SETUID, SETGID, SETPCAP, KILL and CHOWN to start the agent as another uid with no capabilities, and %s lets a container keep none but NET_BIND_SERVICE (user namespaces included); pass --kube-pod-security restricted (the agent then shares the watcher's uid, walled off PID 1 by Landlock's signal scope and a seccomp wall; Linux 6.12 on the node), or run the boxes in a namespace labelled pod-security.kubernetes.io/enforce=baseline (the admission said: %w)", ns, level, level, err)
	case a.Code == http.StatusForbidden && (strings.Contains(a.Message, "quota") || strings.Contains(a.Message, "LimitRange") || strings.Contains(a.Message, "must specify") || strings.Contains(a.Message, "maximum") || strings.Contains(a.Message, "minimum")):
		return exitcode.Refused("kubernetes: namespace %s's resource policy refuses the box's pod: size it with --memory, --kube-cpu-request, --kube-cpu-limit, --kube-ephemeral-storage-request and --kube-ephemeral-storage-limit to fit (the admission said: %w)", ns, err)
	case a.Code == http.StatusForbidden && strings.Contains(a.Message, "RuntimeClass"):
		return exitcode.Usage("kubernetes: --kube-runtime-class names no RuntimeClass of the cluster: pick one of `kubectl get runtimeclass` (%w)", err)
	case a.Code == http.StatusForbidden:
		return exitcode.Engine("kubernetes: the cluster denies this identity pods in namespace %s: apply `supervisor kubernetes rbac --namespace %s --subject NAME` for it (%w)", ns, ns, err)
	case a.Code == http.StatusNotFound && strings.Contains(a.Message, "namespace"):
		return exitcode.Usage("kubernetes: namespace %s does not exist: create it (kubectl create namespace %s) or name another with --kube-namespace (%w)", ns, ns, err)
	case a.Code == http.StatusUnprocessableEntity:
		return exitcode.Usage("kubernetes: the API server finds the box's pod invalid: mend the --kube-* flags it names (%w)", err)
	case a.Code == http.StatusUnauthorized:
		return exitcode.Engine("kubernetes: the cluster refuses this identity's credentials: check the kubeconfig's user (%w)", err)
	}
	return nil
}

// admissionProbe asks for a dry run of the probe pod: nil when the
// cluster would admit it (a pod of that name that exists, 409, has
// passed admission too).
func admissionProbe(err error, ns, mode string) error {
	var a *APIError
	if err == nil || errors.As(err, &a) && a.Code == http.StatusConflict {
		return nil
	}
	if r := createRefusal(err, ns, mode); r != nil {
		return r
	}
	return exitcode.Engine("kubernetes: a dry run of a box's pod in namespace %s: %w", ns, err)
}
