package kubernetes

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"deathwatch/shared"
	"deathwatch/supervisor/exitcode"
)

func TestDryRunPodRequest(t *testing.T) {
	r := DryRunPodRequest(probePod(Options{Namespace: "ns"}))
	if r.Method != "POST" || r.Path != "/api/v1/namespaces/ns/pods" || r.Query.Encode() != (url.Values{"dryRun": {"All"}}).Encode() {
		t.Errorf("request %+v", r)
	}
	if p := r.Body.(Pod); p.Metadata.Name != probePodName || p.Spec.Containers[0].SecurityContext.Capabilities.Add == nil {
		t.Errorf("the probe pod is not a box's pod: %+v", p)
	}
	if p := probePod(Options{Namespace: "ns", WatcherImage: "w:1"}); len(p.Spec.InitContainers) != 1 {
		t.Errorf("with a watcher image the probe pod has no init container: %+v", p.Spec)
	}
}

func TestCreateRefusal(t *testing.T) {
	pss := `pods "dw-x" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false, unrestricted capabilities (container "box" must not include "CHOWN", "KILL" in securityContext.capabilities.add)`
	for _, tc := range []struct {
		err  *APIError
		code int
		want []string
	}{
		{&APIError{Code: 403, Reason: "Forbidden", Message: pss}, shared.ExitRefused, []string{`enforces Pod Security "restricted"`, "needs baseline", "SETUID", "pass --kube-pod-security restricted", "Linux 6.12", "pod-security.kubernetes.io/enforce=baseline", "namespace agents"}},
		{&APIError{Code: 403, Reason: "Forbidden", Message: `pods "dw-x" is forbidden: failed quota: q: must specify limits.cpu for: box`}, shared.ExitRefused, []string{"--kube-cpu-limit", "resource policy"}},
		{&APIError{Code: 403, Reason: "Forbidden", Message: `pods is forbidden: User "bob" cannot create resource "pods" in API group "" in the namespace "agents"`}, shared.ExitEngine, []string{"supervisor kubernetes rbac --namespace agents"}},
		{&APIError{Code: 404, Reason: "NotFound", Message: `namespaces "agents" not found`}, shared.ExitUsage, []string{"does not exist", "kubectl create namespace agents", "--kube-namespace"}},
		{&APIError{Code: 401, Reason: "Unauthorized"}, shared.ExitEngine, []string{"credentials"}},
		{&APIError{Code: 403, Reason: "Forbidden", Message: `pod rejected: RuntimeClass "gvisor" not found`}, shared.ExitUsage, []string{"kubectl get runtimeclass"}},
		{&APIError{Code: 422, Reason: "Invalid", Message: `Pod "x" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1`}, shared.ExitUsage, []string{"--kube-*"}},
	} {
		err := createRefusal(tc.err, "agents", PodSecurityBaseline)
		if err == nil || exitcode.Of(err, 0) != tc.code || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v (code %d), want one line with code %d", tc.err.Message, err, exitcode.Of(err, 0), tc.code)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %q lacks %q", tc.err.Message, err, w)
			}
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%v does not wrap the API's answer", err)
		}
	}
	// A restricted pod refused by Pod Security: no flag left to name.
	err := createRefusal(&APIError{Code: 403, Reason: "Forbidden", Message: `pods "dw-x" is forbidden: violates PodSecurity "restricted:latest": seLinuxOptions`}, "agents", PodSecurityRestricted)
	if exitcode.Of(err, 0) != shared.ExitRefused || !strings.Contains(err.Error(), "refuses even a --kube-pod-security restricted pod") {
		t.Errorf("a restricted pod refused: %v", err)
	}
	if err := createRefusal(&APIError{Code: 500, Message: "etcd"}, "ns", PodSecurityBaseline); err != nil {
		t.Errorf("a 500 is no refusal: %v", err)
	}
	if err := admissionProbe(&APIError{Code: 409, Reason: "AlreadyExists"}, "ns", PodSecurityBaseline); err != nil {
		t.Errorf("a 409 passed admission: %v", err)
	}
}

func TestProbeAsksAdmission(t *testing.T) {
	f, srv := newFake(t)
	rt, _ := newRuntime(t, "KUBECONFIG="+kubeconfigFor(t, srv, f.token), EnvNamespace+"=ns")
	ctx := context.Background()
	info, err := rt.Probe(ctx)
	if err != nil || f.dryRuns != 1 || !strings.Contains(info.Detail, "namespace ns") || !strings.Contains(info.Detail, "baseline") {
		t.Fatalf("Probe = %+v, %v after %d dry runs", info, err, f.dryRuns)
	}
	if len(f.pods) != 0 {
		t.Errorf("the dry run stored a pod: %v", f.pods)
	}
	f.refuse = &APIError{Code: 403, Reason: "Forbidden", Message: `pods "x" is forbidden: violates PodSecurity "restricted:v1.37": runAsNonRoot != true`}
	if _, err := rt.Probe(ctx); exitcode.Of(err, 0) != shared.ExitRefused || !strings.Contains(err.Error(), "needs baseline") {
		t.Errorf("Probe in a restricted namespace = %v (code %d), want 243 naming the level it needs", err, exitcode.Of(err, 0))
	}
	b := testBox()
	rt.Prepare(ctx, b)
	if err := rt.Create(ctx, b); exitcode.Of(err, 0) != shared.ExitRefused {
		t.Errorf("Create in a restricted namespace = %v (code %d), want 243", err, exitcode.Of(err, 0))
	}
	// doctor's line: the level the namespace enforces and the mode boxes
	// use; the dry run is of the mode's pod.
	f.refuse = nil
	f.levels = map[string]string{"ns": "restricted"}
	rs, _ := newRuntime(t, "KUBECONFIG="+kubeconfigFor(t, srv, f.token), EnvNamespace+"=ns", EnvPodSecurity+"=restricted")
	info, err = rs.Probe(ctx)
	if err != nil || !strings.Contains(info.Detail, `namespace ns enforces Pod Security "restricted"`) || !strings.Contains(info.Detail, "boxes use --kube-pod-security restricted") {
		t.Errorf("Probe in restricted mode = %+v, %v", info, err)
	}
	if c := f.lastPod.Spec.Containers[0]; len(c.SecurityContext.Capabilities.Add) != 0 || c.Command[len(c.Command)-1] != "--restricted" {
		t.Errorf("the dry run in restricted mode was of %+v", c)
	}
	if info, _ = rt.Probe(ctx); !strings.Contains(info.Detail, `enforces Pod Security "restricted"; boxes use --kube-pod-security baseline`) {
		t.Errorf("Probe in baseline mode: %q", info.Detail)
	}
	f.levels = nil
	if info, _ = rt.Probe(ctx); !strings.Contains(info.Detail, "not for this identity to read (it may not get namespaces)") {
		t.Errorf("Probe without the namespace's label: %q", info.Detail)
	}
	if _, err := (&Runtime{env: []string{EnvPodSecurity + "=strict"}}).options(); exitcode.Of(err, 0) != shared.ExitUsage || !strings.Contains(err.Error(), "want baseline or restricted") {
		t.Errorf("--kube-pod-security strict: %v", err)
	}
	f.refuse = &APIError{Code: 404, Reason: "NotFound", Message: `namespaces "ns" not found`}
	if _, err := rt.Probe(ctx); exitcode.Of(err, 0) != shared.ExitUsage {
		t.Errorf("Probe in a missing namespace = %v (code %d), want 240", err, exitcode.Of(err, 0))
	}
}
