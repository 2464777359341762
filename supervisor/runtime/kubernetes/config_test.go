package kubernetes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseKubeconfig(t *testing.T) {
	dir := t.TempDir()
	for n, s := range map[string]string{"ca.crt": "CA", "c.crt": "CERT", "c.key": "KEY", "tok": "T0K\n"} {
		os.WriteFile(filepath.Join(dir, n), []byte(s), 0o600)
	}
	const head = "current-context: a\ncontexts:\n- name: a\n  context: {cluster: k, user: u, namespace: team}\nclusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:16443', certificate-authority: ca.crt}\n"
	for _, tc := range []struct {
		name, users, want string
		check             func(*Cluster) bool
	}{
		{"client cert files relative to the kubeconfig", "users:\n- name: u\n  user: {client-certificate: c.crt, client-key: " + dir + "/c.key}\n", "",
			func(c *Cluster) bool {
				return string(c.CertPEM) == "CERT" && string(c.KeyPEM) == "KEY" && string(c.CA) == "CA" && c.Namespace == "team" && c.Server == "https://127.0.0.1:16443"
			}},
		{"inline data", "users:\n- name: u\n  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}\n", "",
			func(c *Cluster) bool { return string(c.CertPEM) == "CERT" && string(c.KeyPEM) == "KEY" }},
		{"token file", "users:\n- name: u\n  user: {tokenFile: tok}\n", "", func(c *Cluster) bool { return c.Token == "T0K" }},
		{"exec plugin refused", "users:\n- name: u\n  user: {exec: {command: aws}}\n", "exec and auth-provider", nil},
		{"cert without key", "users:\n- name: u\n  user: {client-certificate: c.crt}\n", "needs its key", nil},
		{"undefined user", "users: []\n", `user "u"`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseKubeconfig([]byte(head+tc.users), dir)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil || !tc.check(c) {
				t.Fatalf("ParseKubeconfig = %+v, %v", c, err)
			}
		})
	}
	for _, bad := range []string{"", "current-context: x\n", head[:strings.Index(head, "clusters:")] + "clusters: []\n",
		strings.Replace(head, "https://", "http://", 1)} {
		if _, err := ParseKubeconfig([]byte(bad), dir); err == nil {
			t.Errorf("ParseKubeconfig(%q) took it", bad)
		}
	}
}

func TestInCluster(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "token"), []byte("sa-token\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("CA"), 0o600)
	os.WriteFile(filepath.Join(dir, "namespace"), []byte("agents"), 0o600)
	c, err := inCluster(dir, "fd00::1", "443")
	if err != nil || c.Server != "https://[fd00::1]:443" || c.Token != "sa-token" || c.Namespace != "agents" {
		t.Fatalf("inCluster = %+v, %v", c, err)
	}
}
