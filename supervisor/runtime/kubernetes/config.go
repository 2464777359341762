package kubernetes

// Where the runtime finds its cluster: a kubeconfig read as kubectl
// reads it (kubeconfig.go) or, inside a pod, the service account.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"deathwatch/supervisor/exitcode"
)

// The engine-environment variables the runtime reads (the CLI's
// --kube-* flags set them, so that exec, reconcile, ls and doctor see
// the same cluster).
const (
	EnvKubeconfig    = "KUBECONFIG"
	EnvContext       = "DEATHWATCH_K8S_CONTEXT"        // --kube-context: the kubeconfig context; default: current-context
	EnvNamespace     = "DEATHWATCH_K8S_NAMESPACE"      // --kube-namespace; default: the context's, else "default"
	EnvNode          = "DEATHWATCH_K8S_NODE"           // spec.nodeName (a cluster without a scheduler)
	EnvPullNever     = "DEATHWATCH_K8S_PULL_NEVER"     // "1": imagePullPolicy Never
	EnvWatcherImage  = "DEATHWATCH_K8S_WATCHER_IMAGE"  // an image with the watcher at /usr/local/bin/watcher, copied in by an init container
	EnvUserNamespace = "DEATHWATCH_K8S_USER_NAMESPACE" // "1": hostUsers: false
)

// serviceAccountDir is where a pod finds its service account.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Cluster is how to reach one API server as one identity.
type Cluster struct {
	Context       string // the kubeconfig context ("" in a pod)
	Server        string // https://host:port
	CA            []byte // PEM; nil: the system roots
	Insecure      bool   // insecure-skip-tls-verify (refused unless the kubeconfig says so)
	TLSServerName string // the name the server's certificate is checked against, if not the server's host
	ProxyURL      string // the cluster's proxy-url; "": HTTPS_PROXY/NO_PROXY of the environment
	CertPEM       []byte
	KeyPEM        []byte
	Token         string
	TokenFile     string // read again for every request; wins over Token while it can be read
	Exec          *ExecConfig
	Impersonate   Impersonation
	Namespace     string // --kube-namespace, else the context's or the service account's, else "default"
}

// TLS is the client TLS configuration for c; the client certificate
// comes from auth at each handshake (a plugin's may change).
func (c *Cluster) TLS(auth *authenticator) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.Insecure, ServerName: c.TLSServerName}
	if len(c.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.CA) {
			return nil, errors.New("the cluster's certificate authority holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	if len(c.CertPEM) > 0 {
		if _, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM); err != nil {
			return nil, fmt.Errorf("the user's client certificate: %w", err)
		}
	}
	cfg.GetClientCertificate = func(i *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return auth.clientCert(i.Context())
	}
	return cfg, nil
}

// LoadCluster finds the cluster as env says, the way kubectl does: the
// kubeconfig files (KubeconfigFiles) merged, the context
// DEATHWATCH_K8S_CONTEXT names (else current-context), the namespace
// DEATHWATCH_K8S_NAMESPACE names (else the context's); with no
// kubeconfig file, the pod's service account.
func LoadCluster(env []string) (*Cluster, error) {
	o := Overrides{Context: getenv(env, EnvContext), Namespace: getenv(env, EnvNamespace)}
	home := getenv(env, "HOME")
	if home == "" && env == nil {
		home, _ = os.UserHomeDir()
	}
	files := KubeconfigFiles(getenv(env, EnvKubeconfig), home)
	k, err := loadKubeconfig(files)
	if err != nil {
		return nil, err
	}
	if len(k.files) > 0 {
		return k.resolve(o)
	}
	host, port := getenv(env, "KUBERNETES_SERVICE_HOST"), getenv(env, "KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		if len(files) > 0 {
			return nil, fmt.Errorf("no cluster: no kubeconfig at %s, and not in a pod with a service account", strings.Join(files, ", "))
		}
		return nil, errors.New("no cluster: set KUBECONFIG (or make ~/.kube/config), or run in a pod with a service account")
	}
	if o.Context != "" {
		return nil, exitcode.Usage("--kube-context %s: there is no kubeconfig to hold it (in a pod: the service account)", o.Context)
	}
	c, err := inCluster(serviceAccountDir, host, port)
	if err != nil {
		return nil, err
	}
	if ns := getenv(env, "POD_NAMESPACE"); ns != "" {
		c.Namespace = ns
	}
	if o.Namespace != "" {
		c.Namespace = o.Namespace
	}
	return c, nil
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
	c := &Cluster{Server: "https://" + host + ":" + port, CA: ca, Token: strings.TrimSpace(string(tok)),
		TokenFile: filepath.Join(dir, "token"), Namespace: strings.TrimSpace(string(ns))}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	return c, nil
}

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
