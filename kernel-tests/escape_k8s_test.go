package kerneltests

import (
	"net"
	"strings"
	"testing"
)

// TestEscapeKubernetesAPI: an agent in a kubernetes box looks for the
// cluster's API the ways a workload usually finds it, and finds none: no
// service-account token mounted, no KUBERNETES_* variables in its
// environment (the kubelet gives them to the container; the watcher must
// not pass them on), and no connection to the API server, the kubelet or
// the service address from inside the pod, at any address of this host.
// In the test cluster the pod network reaches only itself; on a real
// cluster the namespace's NetworkPolicy decides that reach (README), the
// token and the variables are ours to withhold everywhere.
func TestEscapeKubernetesAPI(t *testing.T) {
	r := newK8sRig(t)
	svc, err := r.k.Kubectl("get", "service", "kubernetes", "--namespace", "default", "-o", "jsonpath={.spec.clusterIP}:{.spec.ports[0].port}")
	if err != nil || svc == "" {
		t.Fatalf("the cluster's kubernetes service: %q, %v", svc, err)
	}
	targets := []string{svc, "127.0.0.1:16443", "127.0.0.1:10250"}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ip, ok := a.(*net.IPNet)
		if !ok || ip.IP.To4() == nil || ip.IP.IsLoopback() {
			continue
		}
		for _, port := range []string{"16443", "10250", "6443", "443"} {
			targets = append(targets, net.JoinHostPort(ip.IP.String(), port))
		}
	}
	script := `env | grep -q '^KUBERNETES_' && echo found-kubernetes-env
ls /var/run/secrets/kubernetes.io/serviceaccount/token /run/secrets/kubernetes.io/serviceaccount/token >/dev/null 2>&1 && echo found-token
for a in "$@"; do nc -w 2 "${a%:*}" "${a##*:}" </dev/null >/dev/null 2>&1 && echo "reached $a"; done
nc -l -p 7777 </dev/null >/dev/null 2>&1 & sleep 1
nc -w 2 127.0.0.1 7777 </dev/null >/dev/null 2>&1 && echo control-reached
echo looked`
	code, out, errOut := r.run(nil, append([]string{"--", "sh", "-c", script, "sh"}, targets...)...)
	if code != 0 || !strings.Contains(out, "looked") {
		t.Fatalf("the agent: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The control: the same nc reaches a listener the agent started on its
	// own loopback, so "not reached" above is the network's answer.
	if !strings.Contains(out, "control-reached") {
		t.Errorf("the agent's nc did not reach its own listener: the probe proves nothing\n%s", out)
	}
	for _, found := range []string{"found-kubernetes-env", "found-token", "reached "} {
		if strings.Contains(out, found) {
			t.Errorf("the agent %s:\n%s", found, out)
		}
	}
	t.Logf("tried %d addresses from the agent (%s …): none reached, no token, no KUBERNETES_* variable", len(targets), strings.Join(targets[:3], ", "))
}
