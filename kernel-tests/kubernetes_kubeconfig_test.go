package kerneltests

// The kubernetes runtime reads kubeconfigs as kubectl does: the same
// merged KUBECONFIG list, context, cluster, user and namespace as
// `kubectl config view --minify --raw --flatten` on the same files
// (kubectl is the oracle), and a box on the test cluster through a
// merged list, --kube-context and exec credential plugins (scripts of
// the test's own).

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor/runtime/kubernetes"
)

// kubectlView is what `kubectl config view --minify --raw --flatten -o
// json` says of one context.
type kubectlView struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Cluster struct {
			Server        string `json:"server"`
			CAData        string `json:"certificate-authority-data"`
			Insecure      bool   `json:"insecure-skip-tls-verify"`
			TLSServerName string `json:"tls-server-name"`
			ProxyURL      string `json:"proxy-url"`
		} `json:"cluster"`
	} `json:"clusters"`
	Contexts []struct {
		Context struct {
			Namespace string `json:"namespace"`
		} `json:"context"`
	} `json:"contexts"`
	Users []struct {
		User struct {
			CertData  string   `json:"client-certificate-data"`
			KeyData   string   `json:"client-key-data"`
			Token     string   `json:"token"`
			TokenFile string   `json:"tokenFile"`
			As        string   `json:"as"`
			AsGroups  []string `json:"as-groups"`
			Exec      *struct {
				APIVersion      string   `json:"apiVersion"`
				Command         string   `json:"command"`
				Args            []string `json:"args"`
				InteractiveMode string   `json:"interactiveMode"`
				Env             []struct{ Name, Value string }
			} `json:"exec"`
		} `json:"user"`
	} `json:"users"`
}

func TestKubernetesKubeconfigLikeKubectl(t *testing.T) {
	ktest.RequireRoot(t)
	if _, err := os.Stat(ktest.K8sKubectl); err != nil {
		t.Fatalf("kubectl, the oracle, is missing (%v): run kernel-tests/provision.sh", err)
	}
	// The runtime's unit tests' fixtures (TestLoadCluster), here beside
	// kubectl.
	dir := filepath.Join(ktest.RepoRoot(), "supervisor", "runtime", "kubernetes", "testdata", "kubeconfig")
	list := func(n ...string) string {
		for i := range n {
			n[i] = filepath.Join(dir, n[i])
		}
		return strings.Join(n, ":")
	}
	b64 := func(s []byte) string {
		if len(s) == 0 {
			return ""
		}
		return base64.StdEncoding.EncodeToString(s)
	}
	for _, tc := range []struct{ kubeconfig, context string }{
		{list("missing.yaml", "a.yaml", "sub/b.yaml"), ""},
		{list("sub/b.yaml", "a.yaml"), ""},
		{list("a.yaml", "sub/b.yaml"), "cross"},
		{list("a.yaml", "sub/b.yaml"), "tokfile"},
		{list("a.yaml", "sub/b.yaml"), "plugin"},
		{list("a.yaml", "sub/b.yaml"), "b"},
		{list("sub/b.yaml", "a.yaml", "sub/b.yaml"), "a"},
		{list("a.yaml", "sub/b.yaml"), "nosuch"},
		{list("a.yaml", "sub/b.yaml"), "nocluster"},
		{list("a.yaml"), "nouser"},
		{list("missing.yaml"), ""},
	} {
		name := tc.kubeconfig + " --context " + tc.context
		args := []string{"config", "view", "--minify", "--raw", "--flatten", "-o", "json"}
		if tc.context != "" {
			args = append(args, "--context", tc.context)
		}
		cmd := exec.Command(ktest.K8sKubectl, args...)
		cmd.Env = []string{"KUBECONFIG=" + tc.kubeconfig, "HOME=" + t.TempDir()}
		out, kerr := cmd.Output()
		c, err := kubernetes.LoadCluster([]string{"KUBECONFIG=" + tc.kubeconfig, "HOME=" + t.TempDir(), kubernetes.EnvContext + "=" + tc.context})
		if (kerr != nil) != (err != nil) {
			t.Errorf("%s: kubectl says %v %s; the runtime %v", name, kerr, out, err)
			continue
		}
		if kerr != nil {
			t.Logf("%s: both refuse: %v", name, err)
			continue
		}
		var v kubectlView
		if err := json.Unmarshal(out, &v); err != nil || len(v.Clusters) != 1 || len(v.Contexts) != 1 {
			t.Fatalf("%s: kubectl's view %s: %v", name, out, err)
		}
		cl, u := v.Clusters[0].Cluster, kubectlView{}.Users
		if len(v.Users) == 1 {
			u = v.Users
		}
		ns := v.Contexts[0].Context.Namespace
		if ns == "" {
			ns = "default"
		}
		got := []string{c.Context, c.Server, b64(c.CA), c.TLSServerName, c.ProxyURL, ns}
		want := []string{v.CurrentContext, cl.Server, cl.CAData, cl.TLSServerName, cl.ProxyURL, c.Namespace}
		if len(u) == 1 {
			uu := u[0].User
			got = append(got, b64(c.CertPEM), b64(c.KeyPEM), c.Token, filepath.Base(c.TokenFile), c.Impersonate.User, strings.Join(c.Impersonate.Groups, ","))
			want = append(want, uu.CertData, uu.KeyData, uu.Token, filepath.Base(uu.TokenFile), uu.As, strings.Join(uu.AsGroups, ","))
			if (uu.Exec != nil) != (c.Exec != nil) {
				t.Errorf("%s: exec plugin: kubectl %+v, the runtime %+v", name, uu.Exec, c.Exec)
			} else if uu.Exec != nil {
				e := uu.Exec
				// kubectl shows the command as the file spells it, the
				// runtime resolves it against the file's folder.
				got = append(got, c.Exec.APIVersion, filepath.Base(c.Exec.Command), strings.Join(c.Exec.Args, " "), c.Exec.InteractiveMode, c.Exec.Env[0].Name+"="+c.Exec.Env[0].Value)
				want = append(want, e.APIVersion, filepath.Base(e.Command), strings.Join(e.Args, " "), e.InteractiveMode, e.Env[0].Name+"="+e.Env[0].Value)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n the runtime %q\n kubectl     %q", name, got, want)
		}
	}
}

// writeExecKubeconfig writes a kubeconfig for the test cluster whose
// user is an exec plugin (script, written beside it as ./plugin).
func writeExecKubeconfig(t *testing.T, dir, apiVersion, script string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "plugin"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "exec.kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
current-context: plug
contexts:
- name: plug
  context: {cluster: deathwatch, user: plug}
users:
- name: plug
  user:
    exec: {apiVersion: `+apiVersion+`, command: ./plugin, interactiveMode: IfAvailable, env: [{name: PLUGIN_DIR, value: "`+dir+`"}]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// A box through a merged KUBECONFIG whose first entry is missing, a
// context in one file with its cluster and user in another, chosen with
// --kube-context; and through exec plugins: one answering with the
// admin's client certificate (v1), one with a service account's token
// (v1beta1) whose Role `supervisor kubernetes rbac` printed.
func TestKubernetesKubeconfigMergedAndExecPlugin(t *testing.T) {
	r := newK8sRig(t)
	ctxFile := filepath.Join(r.dir, "contexts.yaml")
	os.WriteFile(ctxFile, []byte(`apiVersion: v1
kind: Config
current-context: nowhere
contexts:
- name: elsewhere
  context: {cluster: deathwatch, user: admin, namespace: `+r.k.Namespace+`}
`), 0o600)
	merged := []string{"KUBECONFIG=" + filepath.Join(r.dir, "missing") + ":" + ctxFile + ":" + r.k.Kubeconfig}
	code, out, errs := r.run(merged, "--", "sh", "-c", "echo merged; exit 3")
	if code == 3 && strings.Contains(out, "merged") {
		t.Errorf("current-context nowhere is no context; exec took it: %d %q %q", code, out, errs)
	}
	c := r.cmd(merged, append([]string{"--kube-context", "elsewhere"}, r.execArgs("--", "sh", "-c", "echo merged; exit 3")...)...)
	o, err := c.CombinedOutput()
	if ee, _ := err.(*exec.ExitError); ee == nil || ee.ExitCode() != 3 || !strings.Contains(string(o), "merged") {
		t.Errorf("--kube-context elsewhere through KUBECONFIG=missing:contexts:admin: %v\n%s", err, o)
	}

	// The admin's certificate from a v1 plugin.
	certDir := t.TempDir()
	cert, _ := os.ReadFile("/var/lib/deathwatch-k8s/pki/admin.crt")
	key, _ := os.ReadFile("/var/lib/deathwatch-k8s/pki/admin.key")
	jsonStr := func(b []byte) string { s, _ := json.Marshal(string(b)); return string(s) }
	kc := writeExecKubeconfig(t, certDir, "client.authentication.k8s.io/v1", `#!/bin/sh
echo run >> "$PLUGIN_DIR/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$PLUGIN_DIR/info"
cat <<'JSON'
{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":`+jsonStr(cert)+`,"clientKeyData":`+jsonStr(key)+`}}
JSON
`)
	plug := []string{"KUBECONFIG=" + kc + ":" + r.k.Kubeconfig}
	code, out, errs = r.run(plug, "--", "sh", "-c", "echo via-plugin-cert; exit 5")
	if code != 5 || !strings.Contains(out, "via-plugin-cert") {
		t.Errorf("exec with a v1 plugin's client certificate: %d %q %q", code, out, errs)
	}
	runs, _ := os.ReadFile(filepath.Join(certDir, "runs"))
	info, _ := os.ReadFile(filepath.Join(certDir, "info"))
	t.Logf("the certificate plugin ran %d times for one exec; KUBERNETES_EXEC_INFO %s", strings.Count(string(runs), "run"), info)
	if n := strings.Count(string(runs), "run"); n != 1 {
		t.Errorf("the plugin ran %d times for one exec: its credential has no expiry and is kept", n)
	}
	if !strings.Contains(string(info), `"interactive":false`) {
		t.Errorf("KUBERNETES_EXEC_INFO %s: want a non-interactive request", info)
	}

	// A service account's token from a v1beta1 plugin.
	sa := "dw-x" + r.instance
	if _, err := r.k.Kubectl("create", "serviceaccount", sa); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.k.Kubectl("delete", "serviceaccount", sa, "--ignore-not-found")
		r.k.Kubectl("delete", "role,rolebinding", "deathwatch-supervisor", "--ignore-not-found")
	})
	manifest, err := r.cmd(nil, "kubernetes", "rbac", "--namespace", r.k.Namespace, "--subject", sa).Output()
	if err != nil {
		t.Fatal(err)
	}
	apply := exec.Command(ktest.K8sKubectl, "--kubeconfig", r.k.Kubeconfig, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(string(manifest))
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	tok, err := r.k.Kubectl("create", "token", sa, "--duration", "1h")
	if err != nil {
		t.Fatal(err)
	}
	tokDir := t.TempDir()
	kc = writeExecKubeconfig(t, tokDir, "client.authentication.k8s.io/v1beta1", `#!/bin/sh
echo run >> "$PLUGIN_DIR/runs"
exp=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)
printf '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"%s"}}' "`+strings.TrimSpace(tok)+`" "$exp"
`)
	plug = []string{"KUBECONFIG=" + kc + ":" + r.k.Kubeconfig}
	ok := ktest.WaitFor(30e9, func() bool {
		code, _, _ = r.run(plug, "--", "true")
		return code == 0
	})
	code, out, errs = r.run(plug, "--", "sh", "-c", "echo via-plugin-token; exit 6")
	if !ok || code != 6 || !strings.Contains(out, "via-plugin-token") {
		t.Errorf("exec with a v1beta1 plugin's service-account token: %d %q %q", code, out, errs)
	}
}
