package kubernetes

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseTolerations(t *testing.T) {
	got, err := ParseTolerations("gpu=true:NoSchedule, dedicated:NoExecute,spot")
	want := []Toleration{
		{Key: "gpu", Operator: "Equal", Value: "true", Effect: "NoSchedule"},
		{Key: "dedicated", Operator: "Exists", Effect: "NoExecute"},
		{Key: "spot", Operator: "Exists"},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ParseTolerations = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"gpu:Sometimes", "=x", "a b", "k=v v"} {
		if _, err := ParseTolerations(bad); err == nil || !strings.Contains(err.Error(), "--kube-toleration") {
			t.Errorf("ParseTolerations(%q) = %v", bad, err)
		}
	}
}

func TestParseNodeSelector(t *testing.T) {
	got, err := ParseNodeSelector("kubernetes.io/arch=amd64,pool=agents")
	if err != nil || !reflect.DeepEqual(got, map[string]string{"kubernetes.io/arch": "amd64", "pool": "agents"}) {
		t.Errorf("ParseNodeSelector = %v, %v", got, err)
	}
	if m, err := ParseNodeSelector(""); m != nil || err != nil {
		t.Errorf("ParseNodeSelector(\"\") = %v, %v", m, err)
	}
	for _, bad := range []string{"pool", "=x", "pool=a b"} {
		if _, err := ParseNodeSelector(bad); err == nil {
			t.Errorf("ParseNodeSelector(%q) took it", bad)
		}
	}
}

func TestKnobs(t *testing.T) {
	var o Options
	env := []string{EnvRuntimeClass + "=gvisor", EnvPullSecrets + "=regcred,other", EnvNodeSelector + "=pool=agents",
		EnvTolerations + "=agents:NoSchedule", EnvCPURequest + "=250m", EnvCPULimit + "=2", EnvStorageRequest + "=100Mi",
		EnvStorageLimit + "=5Gi", EnvAgentDeadline + "=3602"}
	if err := knobs(env, &o); err != nil {
		t.Fatal(err)
	}
	if o.RuntimeClass != "gvisor" || strings.Join(o.PullSecrets, ",") != "regcred,other" || o.NodeSelector["pool"] != "agents" ||
		len(o.Tolerations) != 1 || o.CPURequest != "250m" || o.CPULimit != "2" || o.StorageRequest != "100Mi" || o.StorageLimit != "5Gi" ||
		o.ActiveDeadline != 3602+120+60 {
		t.Errorf("knobs = %+v", o)
	}
	for _, bad := range []string{EnvRuntimeClass + "=Bad_Name", EnvPullSecrets + "=a/b", EnvCPULimit + "=lots", EnvStorageLimit + "=1GB", EnvAgentDeadline + "=1h"} {
		if err := knobs([]string{bad}, &Options{}); err == nil {
			t.Errorf("knobs(%s) took it", bad)
		}
	}
	if ActiveDeadline(0) != 0 || ActiveDeadline(time.Second) != 181 {
		t.Errorf("ActiveDeadline(0) = %d, (1s) = %d", ActiveDeadline(0), ActiveDeadline(time.Second))
	}
}

func TestBuildPodKnobs(t *testing.T) {
	o := Options{Namespace: "ns", RuntimeClass: "gvisor", PullSecrets: []string{"regcred"}, NodeSelector: map[string]string{"pool": "agents"},
		Tolerations: []Toleration{{Key: "agents", Operator: "Exists", Effect: "NoSchedule"}}, CPURequest: "250m", CPULimit: "2",
		StorageRequest: "100Mi", StorageLimit: "5Gi", ActiveDeadline: 3782}
	p := BuildPod(testBox(), o)
	s := p.Spec
	if s.RuntimeClassName != "gvisor" || len(s.ImagePullSecrets) != 1 || s.ImagePullSecrets[0].Name != "regcred" || s.NodeSelector["pool"] != "agents" ||
		!reflect.DeepEqual(s.Tolerations, o.Tolerations) || s.ActiveDeadlineSeconds == nil || *s.ActiveDeadlineSeconds != 3782 {
		t.Errorf("spec %+v", s)
	}
	r := s.Containers[0].Resources
	if r.Requests["cpu"] != "250m" || r.Limits["cpu"] != "2" || r.Requests["ephemeral-storage"] != "100Mi" || r.Limits["ephemeral-storage"] != "5Gi" {
		t.Errorf("resources %+v", r)
	}
	if p := BuildPod(testBox(), Options{Namespace: "ns"}); p.Spec.ActiveDeadlineSeconds != nil || p.Spec.NodeSelector != nil || p.Spec.Containers[0].Resources.Limits["cpu"] != "" {
		t.Errorf("no knobs, yet %+v", p.Spec)
	}
}
