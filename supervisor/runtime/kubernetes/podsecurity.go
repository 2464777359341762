package kubernetes

// Which Pod Security level a box's pod is built for (--kube-pod-security,
// as DEATHWATCH_K8S_POD_SECURITY), and what doctor says of the level
// the namespace enforces.
//
// The level is chosen, never followed from the namespace's enforce
// label: restricted mode trades the agent's uid of its own for walls
// that need Linux 6.12 on the node, a trade a label someone else edits
// must not make for the user; and the label is a namespace's, which
// the minimal Role (rbac.go) cannot grant reading. A baseline pod in a
// namespace enforcing restricted is refused with a line naming the
// flag (admission.go).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// EnvPodSecurity is the level the box's pod is built for:
// PodSecurityBaseline (or "") or PodSecurityRestricted.
const EnvPodSecurity = "DEATHWATCH_K8S_POD_SECURITY"

// enforceLabel is the namespace label Pod Security admission enforces.
const enforceLabel = "pod-security.kubernetes.io/enforce"

// parsePodSecurity reads EnvPodSecurity's value.
func parsePodSecurity(v string) (string, error) {
	switch v {
	case "", PodSecurityBaseline:
		return PodSecurityBaseline, nil
	case PodSecurityRestricted:
		return v, nil
	}
	return "", fmt.Errorf("--kube-pod-security %q: want baseline or restricted", v)
}

// GetNamespaceRequest reads one namespace.
func GetNamespaceRequest(ns string) Request {
	return Request{Method: http.MethodGet, Path: "/api/v1/namespaces/" + url.PathEscape(ns)}
}

// EnforcedLevel is the Pod Security level namespace ns's label
// enforces ("privileged" when it has none: the admission's default
// unless the cluster configures another).
func (k *Client) EnforcedLevel(ctx context.Context, ns string) (string, error) {
	var n struct {
		Metadata Meta `json:"metadata"`
	}
	if err := k.Do(ctx, GetNamespaceRequest(ns), &n); err != nil {
		return "", err
	}
	if l := n.Metadata.Labels[enforceLabel]; l != "" {
		return l, nil
	}
	return "privileged", nil
}

// levelLine is doctor's account of the namespace's level (read with
// err) and of the mode boxes use.
func levelLine(ns, level string, err error, mode string) string {
	enforced := fmt.Sprintf("namespace %s enforces Pod Security %q", ns, level)
	var a *APIError
	switch {
	case errors.As(err, &a) && a.Code == http.StatusForbidden:
		enforced = fmt.Sprintf("the level namespace %s enforces is not for this identity to read (it may not get namespaces)", ns)
	case err != nil:
		enforced = fmt.Sprintf("the level namespace %s enforces could not be read (%v)", ns, err)
	}
	if mode == PodSecurityRestricted {
		return enforced + "; boxes use --kube-pod-security restricted: the agent shares the watcher's uid, walled off PID 1 by its not being dumpable, Landlock's signal scope and a seccomp wall (Linux 6.12 on the node)"
	}
	return enforced + "; boxes use --kube-pod-security baseline: the agent at a uid of its own, the watcher with SETUID, SETGID, SETPCAP, KILL and CHOWN (a namespace enforcing restricted needs --kube-pod-security restricted)"
}
