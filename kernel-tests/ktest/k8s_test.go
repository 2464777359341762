package ktest

import (
	"regexp"
	"testing"
)

// (Not named TestK8s...: make test runs those in the kubernetes lane, which
// runs ./kernel-tests alone.) A namespace name is a DNS label (RFC 1123: at most 63 characters of
// a-z, 0-9 and "-", a letter or digit at each end) for any test name,
// subtests and long names included.
func TestClusterNamespaceName(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	for _, c := range []struct {
		test string
		n    int64
		want string
	}{
		{"TestKubernetesExitCodesAndOutput", 35, "dwt-kubernetesexitcodesandoutput-z"},
		{"TestKubernetesChainControllerKilled/python", 36, "dwt-kuberneteschaincontrollerkilled-python-10"},
		{"TestK8sClusterUp", 1764690000000000000, ""},
		{"Test_Odd__Name--", 0, "dwt-odd-name-0"},
		{"TestAVeryLongTestNameThatGoesOnAndOnWellPastTheSixtyThreeCharacterLimitOfALabel/and_a_subtest", 1764690000000000000, ""},
		{"TestCutAtADash-----------------------------------------------x", 1, ""},
	} {
		got := k8sNamespaceName(c.test, c.n)
		if c.want != "" && got != c.want {
			t.Errorf("k8sNamespaceName(%q, %d) = %q, want %q", c.test, c.n, got, c.want)
		}
		if len(got) > 63 || !label.MatchString(got) {
			t.Errorf("k8sNamespaceName(%q, %d) = %q (%d characters): not a DNS label", c.test, c.n, got, len(got))
		}
	}
	if a, b := k8sNamespaceName("TestX", 1), k8sNamespaceName("TestX", 2); a == b {
		t.Errorf("two calls of one test got the same namespace %q", a)
	}
}

// The Pod Security levels become the namespace labels the admission
// reads; an empty level sets none.
func TestPodSecurityLabels(t *testing.T) {
	got := PodSecurity{Enforce: "restricted", Warn: "baseline"}.labels()
	want := map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "baseline"}
	if len(got) != len(want) {
		t.Fatalf("labels = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("labels = %v, want %v", got, want)
		}
	}
	if l := (PodSecurity{}).labels(); len(l) != 0 {
		t.Errorf("no levels: labels = %v, want none", l)
	}
}
