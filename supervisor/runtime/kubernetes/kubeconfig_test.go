package kubernetes

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestKubeconfigFiles(t *testing.T) {
	for _, tc := range []struct {
		env, home string
		want      []string
	}{
		{"", "/home/u", []string{"/home/u/.kube/config"}},
		{"", "", nil},
		{"/a:/b", "/home/u", []string{"/a", "/b"}},
		{"/a::/b:/a:", "/home/u", []string{"/a", "/b"}},
	} {
		if got := KubeconfigFiles(tc.env, tc.home); !slices.Equal(got, tc.want) {
			t.Errorf("KubeconfigFiles(%q, %q) = %q, want %q", tc.env, tc.home, got, tc.want)
		}
	}
}

// writeFiles writes name → content under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for n, s := range files {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// The fixtures in testdata/kubeconfig are kernel-tests' kubectl oracle's
// too (TestKubernetesKubeconfigLikeKubectl).
func TestLoadCluster(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("testdata", "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	list := func(n ...string) string {
		for i := range n {
			n[i] = p(n[i])
		}
		return strings.Join(n, ":")
	}
	for _, tc := range []struct {
		name, kubeconfig, context, namespace, err string
		check                                     func(*Cluster) bool
	}{
		{"a missing file is skipped; the first file's context, cluster and user win", list("missing.yaml", "a.yaml", "sub/b.yaml"), "", "", "",
			func(c *Cluster) bool {
				return c.Context == "a" && c.Server == "https://a.example:6443" && string(c.CA) == "CA-A" && c.Token == "static" && c.Namespace == "team"
			}},
		{"current-context: the first file that sets it", list("sub/b.yaml", "a.yaml"), "", "", "",
			func(c *Cluster) bool {
				return c.Context == "b" && c.Server == "https://b.example" && c.Namespace == "bns"
			}},
		{"no namespace in the context: default", list("a.yaml", "sub/b.yaml"), "cross", "", "", func(c *Cluster) bool { return c.Namespace == "default" }},
		{"--kube-namespace wins over the context's", list("a.yaml"), "", "ns2", "", func(c *Cluster) bool { return c.Namespace == "ns2" }},
		{"a context whose cluster and user are in another file, paths relative to that file", list("a.yaml", "sub/b.yaml"), "cross", "", "",
			func(c *Cluster) bool {
				return string(c.CA) == "CA-B" && string(c.CertPEM) == "CERT-B" && string(c.KeyPEM) == "KEY-B" && c.ProxyURL == "http://proxy:3128" &&
					c.TLSServerName == "api" && c.Impersonate.User == "alice" && slices.Equal(c.Impersonate.Groups, []string{"devs", "ops"})
			}},
		{"tokenFile relative to its file", list("sub/b.yaml"), "tokfile", "", "", func(c *Cluster) bool { return c.TokenFile == p("sub/tok") }},
		{"an exec command with a '/' is relative to its file", list("a.yaml", "sub/b.yaml"), "plugin", "", "",
			func(c *Cluster) bool {
				return c.Exec != nil && c.Exec.Command == p("sub/bin/plug") && slices.Equal(c.Exec.Args, []string{"get-token"}) && c.Exec.Env[0] == ExecEnv{"X", "1"}
			}},
		{"no such context", list("a.yaml"), "zzz", "", "--kube-context zzz: kubeconfig", nil},
		{"a user no file defines", list("a.yaml"), "nouser", "", `user "ghost", which no file defines`, nil},
		{"a cluster no file defines", list("sub/b.yaml"), "nocluster", "", `cluster "ghost", which no file defines`, nil},
		{"plain http", list("http.yaml"), "", "", "not an https:// URL", nil},
		{"a file that does not parse", list("a.yaml", "bad.yaml"), "", "", "bad.yaml is not a kubeconfig", nil},
		{"no current-context", list("empty.yaml"), "", "", "no current-context: pass --kube-context", nil},
		{"only missing files", list("missing.yaml"), "", "", "no kubeconfig at", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"HOME=" + dir, EnvKubeconfig + "=" + tc.kubeconfig, EnvContext + "=" + tc.context, EnvNamespace + "=" + tc.namespace}
			c, err := LoadCluster(env)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !tc.check(c) {
				t.Fatalf("LoadCluster = %+v, %v", c, err)
			}
		})
	}
}

func TestSetUserRefuses(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"c.crt": "CERT"})
	for _, tc := range []struct {
		name string
		u    userEntry
		want string
	}{
		{"auth-provider", userEntry{Auth: map[string]any{"name": "gcp"}}, "use the provider's exec plugin"},
		{"basic auth", userEntry{Username: "u", Password: "p"}, "username/password"},
		{"a certificate without its key", userEntry{Cert: "c.crt"}, "needs its key"},
		{"an unreadable tokenFile", userEntry{TokenFile: "nope"}, "tokenFile"},
		{"exec v1 without interactiveMode", userEntry{Exec: &ExecConfig{APIVersion: execV1, Command: "x"}}, "interactiveMode must be set"},
		{"exec Always", userEntry{Exec: &ExecConfig{APIVersion: execV1, Command: "x", InteractiveMode: "Always"}}, "belongs to the agent"},
		{"exec v1alpha1", userEntry{Exec: &ExecConfig{APIVersion: "client.authentication.k8s.io/v1alpha1", Command: "x"}}, "is not supported"},
	} {
		if err := (&Cluster{}).setUser(tc.u, dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	c := &Cluster{}
	if err := c.setUser(userEntry{Exec: &ExecConfig{APIVersion: execV1beta1, Command: "aws"}}, dir); err != nil || c.Exec.Command != "aws" {
		t.Errorf("v1beta1 without interactiveMode (IfAvailable): %+v, %v", c.Exec, err)
	}
}
