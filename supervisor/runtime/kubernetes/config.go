package kubernetes

// Where the runtime finds its cluster: a kubeconfig (KUBECONFIG, else
// ~/.kube/config) or, inside a pod, the service account. Only what the
// runtime uses is read: the current context's cluster (server, CA),
// user (client certificate and key, or a bearer token) and namespace.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// The engine-environment variables the runtime reads (the CLI's flags
// for this runtime are these, so that reconcile, ls and doctor see the
// same cluster as exec).
const (
	EnvKubeconfig   = "KUBECONFIG"
	EnvNamespace    = "DEATHWATCH_K8S_NAMESPACE"     // default: the context's, else "default"
	EnvNode         = "DEATHWATCH_K8S_NODE"          // spec.nodeName (a cluster without a scheduler)
	EnvPullNever    = "DEATHWATCH_K8S_PULL_NEVER"    // "1": imagePullPolicy Never
	EnvWatcherImage = "DEATHWATCH_K8S_WATCHER_IMAGE" // an image with the watcher at /usr/local/bin/watcher, copied in by an init container
)

// serviceAccountDir is where a pod finds its service account.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Cluster is how to reach one API server as one identity.
type Cluster struct {
	Server    string // https://host:port
	CA        []byte // PEM; nil: the system roots
	Insecure  bool   // insecure-skip-tls-verify (refused unless the kubeconfig says so)
	CertPEM   []byte
	KeyPEM    []byte
	Token     string
	Namespace string // the context's, or the service account's
}

// TLS is the client TLS configuration for c.
func (c *Cluster) TLS() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.Insecure}
	if len(c.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CA) {
			return nil, errors.New("the cluster's certificate authority holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	if len(c.CertPEM) > 0 {
		cert, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
		if err != nil {
			return nil, fmt.Errorf("the user's client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

type kubeconfig struct {
	CurrentContext string `yaml:"current-context"`
	Clusters       []struct {
		Name    string `yaml:"name"`
		Cluster struct {
			Server   string `yaml:"server"`
			CA       string `yaml:"certificate-authority"`
			CAData   string `yaml:"certificate-authority-data"`
			Insecure bool   `yaml:"insecure-skip-tls-verify"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Contexts []struct {
		Name    string `yaml:"name"`
		Context struct {
			Cluster   string `yaml:"cluster"`
			User      string `yaml:"user"`
			Namespace string `yaml:"namespace"`
		} `yaml:"context"`
	} `yaml:"contexts"`
	Users []struct {
		Name string `yaml:"name"`
		User struct {
			Cert      string `yaml:"client-certificate"`
			CertData  string `yaml:"client-certificate-data"`
			Key       string `yaml:"client-key"`
			KeyData   string `yaml:"client-key-data"`
			Token     string `yaml:"token"`
			TokenFile string `yaml:"tokenFile"`
			Exec      any    `yaml:"exec"`
			Auth      any    `yaml:"auth-provider"`
		} `yaml:"user"`
	} `yaml:"users"`
}

// ParseKubeconfig reads the current context of a kubeconfig. Relative
// file paths in it are relative to dir (the kubeconfig's folder).
func ParseKubeconfig(data []byte, dir string) (*Cluster, error) {
	var k kubeconfig
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	if k.CurrentContext == "" {
		return nil, errors.New("no current-context")
	}
	c := &Cluster{}
	var clusterName, userName string
	found := false
	for _, x := range k.Contexts {
		if x.Name == k.CurrentContext {
			clusterName, userName, c.Namespace, found = x.Context.Cluster, x.Context.User, x.Context.Namespace, true
		}
	}
	if !found {
		return nil, fmt.Errorf("current-context %q is not among its contexts", k.CurrentContext)
	}
	file := func(p string) ([]byte, error) {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return os.ReadFile(p)
	}
	pick := func(data, path, what string) ([]byte, error) {
		switch {
		case data != "":
			b, err := base64.StdEncoding.DecodeString(data)
			if err != nil {
				return nil, fmt.Errorf("%s-data: %w", what, err)
			}
			return b, nil
		case path != "":
			b, err := file(path)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			return b, nil
		}
		return nil, nil
	}
	found = false
	for _, x := range k.Clusters {
		if x.Name != clusterName {
			continue
		}
		found = true
		c.Server, c.Insecure = strings.TrimRight(x.Cluster.Server, "/"), x.Cluster.Insecure
		var err error
		if c.CA, err = pick(x.Cluster.CAData, x.Cluster.CA, "certificate-authority"); err != nil {
			return nil, err
		}
	}
	if !found {
		return nil, fmt.Errorf("context %q names cluster %q, which it does not define", k.CurrentContext, clusterName)
	}
	if u, err := url.Parse(c.Server); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("cluster %q: server %q is not an https:// URL", clusterName, c.Server)
	}
	found = false
	for _, x := range k.Users {
		if x.Name != userName {
			continue
		}
		found = true
		u := x.User
		if u.Exec != nil || u.Auth != nil {
			return nil, fmt.Errorf("user %q: exec and auth-provider credentials are not supported; use a client certificate or a token", userName)
		}
		var err error
		if c.CertPEM, err = pick(u.CertData, u.Cert, "client-certificate"); err != nil {
			return nil, err
		}
		if c.KeyPEM, err = pick(u.KeyData, u.Key, "client-key"); err != nil {
			return nil, err
		}
		c.Token = u.Token
		if c.Token == "" && u.TokenFile != "" {
			b, err := file(u.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("tokenFile: %w", err)
			}
			c.Token = strings.TrimSpace(string(b))
		}
	}
	if !found && userName != "" {
		return nil, fmt.Errorf("context %q names user %q, which it does not define", k.CurrentContext, userName)
	}
	if (len(c.CertPEM) > 0) != (len(c.KeyPEM) > 0) {
		return nil, fmt.Errorf("user %q: a client certificate needs its key and a key its certificate", userName)
	}
	return c, nil
}

// LoadCluster finds the cluster as env says: $KUBECONFIG (its first
// file), else ~/.kube/config, else the pod's service account.
func LoadCluster(env []string) (*Cluster, error) {
	path := getenv(env, EnvKubeconfig)
	if i := strings.IndexByte(path, os.PathListSeparator); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		if home, err := os.UserHomeDir(); err == nil {
			if p := filepath.Join(home, ".kube", "config"); fileExists(p) {
				path = p
			}
		}
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		c, err := ParseKubeconfig(data, filepath.Dir(path))
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
		}
		return c, nil
	}
	host, port := getenv(env, "KUBERNETES_SERVICE_HOST"), getenv(env, "KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("no cluster: set KUBECONFIG (or ~/.kube/config), or run in a pod with a service account")
	}
	return inCluster(serviceAccountDir, host, port)
}

// inCluster is the service account's identity at dir.
func inCluster(dir, host, port string) (*Cluster, error) {
	tok, err := os.ReadFile(filepath.Join(dir, "token"))
	if err != nil {
		return nil, fmt.Errorf("in-cluster: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("in-cluster: %w", err)
	}
	ns, _ := os.ReadFile(filepath.Join(dir, "namespace"))
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return &Cluster{Server: "https://" + host + ":" + port, CA: ca, Token: strings.TrimSpace(string(tok)), Namespace: strings.TrimSpace(string(ns))}, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// getenv reads name from env (the engine environment; nil: the
// process's own).
func getenv(env []string, name string) string {
	if env == nil {
		return os.Getenv(name)
	}
	v := ""
	for _, kv := range env {
		if s, ok := strings.CutPrefix(kv, name+"="); ok {
			v = s
		}
	}
	return v
}
