package kubernetes

// The identity a request carries, as client-go's transport gives it: a
// token (the kubeconfig's, else its tokenFile read again for every
// request, as a projected service-account token rotates), a client
// certificate, or an exec credential plugin's answer
// (client.authentication.k8s.io v1 or v1beta1), kept until its
// expirationTimestamp and dropped when the server answers 401 to it. A
// static token wins over the plugin's token, a static certificate over
// the plugin's certificate. The plugin never gets the supervisor's
// terminal or stdin (they are the agent's): it runs non-interactive,
// and a plugin that asks for interactiveMode Always is refused.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// The exec credential API versions client-go speaks.
const (
	execV1      = "client.authentication.k8s.io/v1"
	execV1beta1 = "client.authentication.k8s.io/v1beta1"
	execInfoEnv = "KUBERNETES_EXEC_INFO"
)

// Impersonation is a user's as, as-uid and as-groups.
type Impersonation struct {
	User, UID string
	Groups    []string
}

// checkExec refuses an exec configuration client-go would refuse, and
// one that needs a terminal.
func checkExec(e *ExecConfig) error {
	switch e.APIVersion {
	case execV1, execV1beta1:
	case "":
		return errors.New("exec plugin: no apiVersion; want " + execV1)
	default:
		return fmt.Errorf("exec plugin: apiVersion %q is not supported; want %s or %s", e.APIVersion, execV1, execV1beta1)
	}
	if e.Command == "" {
		return errors.New("exec plugin: no command")
	}
	switch e.InteractiveMode {
	case "":
		if e.APIVersion == execV1 {
			return fmt.Errorf("exec plugin %s: interactiveMode must be set for %s (Never or IfAvailable)", e.Command, execV1)
		}
	case "Never", "IfAvailable":
	case "Always":
		return fmt.Errorf("exec plugin %s: interactiveMode Always needs a terminal, and the supervisor's terminal belongs to the agent: log in beforehand so the plugin can run with Never or IfAvailable", e.Command)
	default:
		return fmt.Errorf("exec plugin %s: interactiveMode %q: want Never, IfAvailable or Always", e.Command, e.InteractiveMode)
	}
	return nil
}

// ExecPluginEnv is the plugin's environment: base (the engine
// environment), then the kubeconfig's env, then KUBERNETES_EXEC_INFO
// (the ExecCredential request: non-interactive, with the cluster when
// provideClusterInfo).
func ExecPluginEnv(c *Cluster, base []string) ([]string, error) {
	spec := map[string]any{"interactive": false}
	if c.Exec.ProvideClusterInfo {
		cl := map[string]any{"server": c.Server}
		if c.TLSServerName != "" {
			cl["tls-server-name"] = c.TLSServerName
		}
		if c.Insecure {
			cl["insecure-skip-tls-verify"] = true
		}
		if len(c.CA) > 0 {
			cl["certificate-authority-data"] = c.CA // []byte: base64 in JSON, as the API's
		}
		if c.ProxyURL != "" {
			cl["proxy-url"] = c.ProxyURL
		}
		spec["cluster"] = cl
	}
	info, err := json.Marshal(map[string]any{"apiVersion": c.Exec.APIVersion, "kind": "ExecCredential", "spec": spec})
	if err != nil {
		return nil, err
	}
	env := append([]string(nil), base...)
	for _, e := range c.Exec.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	return append(env, execInfoEnv+"="+string(info)), nil
}

// credential is what a plugin returned.
type credential struct {
	token   string
	cert    *tls.Certificate
	expires time.Time // zero: until the server refuses it
}

// parseExecCredential reads a plugin's stdout, which must be an
// ExecCredential of apiVersion with a token or a certificate and key.
func parseExecCredential(out []byte, apiVersion string) (*credential, error) {
	var r struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Status     *struct {
			Token      string     `json:"token"`
			Cert       string     `json:"clientCertificateData"`
			Key        string     `json:"clientKeyData"`
			Expiration *time.Time `json:"expirationTimestamp"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("its output is not an ExecCredential: %w", err)
	}
	switch {
	case r.Kind != "ExecCredential":
		return nil, fmt.Errorf("its output is of kind %q, not ExecCredential", r.Kind)
	case r.APIVersion != apiVersion:
		return nil, fmt.Errorf("it answered in %q, the kubeconfig asks for %q", r.APIVersion, apiVersion)
	case r.Status == nil:
		return nil, errors.New("its ExecCredential has no status")
	case r.Status.Token == "" && r.Status.Cert == "":
		return nil, errors.New("its ExecCredential holds neither a token nor a client certificate")
	case (r.Status.Cert == "") != (r.Status.Key == ""):
		return nil, errors.New("its ExecCredential holds a client certificate without its key, or a key without its certificate")
	}
	c := &credential{token: r.Status.Token}
	if r.Status.Expiration != nil {
		c.expires = *r.Status.Expiration
	}
	if r.Status.Cert != "" {
		cert, err := tls.X509KeyPair([]byte(r.Status.Cert), []byte(r.Status.Key))
		if err != nil {
			return nil, fmt.Errorf("its client certificate: %w", err)
		}
		c.cert = &cert
	}
	return c, nil
}

// authenticator gives requests their identity.
type authenticator struct {
	c   *Cluster
	env []string // the plugin's base environment; nil: os.Environ()
	now func() time.Time

	mu     sync.Mutex
	cached *credential
}

func newAuthenticator(c *Cluster, env []string) *authenticator {
	if env == nil {
		env = os.Environ()
	}
	return &authenticator{c: c, env: env, now: time.Now}
}

// token is the bearer token for a request ("" for none).
func (a *authenticator) token(ctx context.Context) (string, error) {
	if a.c.TokenFile != "" {
		if t, err := readToken(a.c.TokenFile); err == nil {
			return t, nil
		} else if a.c.Token == "" {
			return "", err
		}
	}
	if a.c.Token != "" || a.c.Exec == nil {
		return a.c.Token, nil
	}
	cr, err := a.credential(ctx)
	if err != nil {
		return "", err
	}
	return cr.token, nil
}

// clientCert is the certificate for a TLS handshake (an empty one for
// none): the static one, else the plugin's when no static token is set.
func (a *authenticator) clientCert(ctx context.Context) (*tls.Certificate, error) {
	if len(a.c.CertPEM) > 0 {
		cert, err := tls.X509KeyPair(a.c.CertPEM, a.c.KeyPEM)
		if err != nil {
			return nil, fmt.Errorf("the user's client certificate: %w", err)
		}
		return &cert, nil
	}
	if a.c.Exec == nil || a.c.Token != "" || a.c.TokenFile != "" {
		return &tls.Certificate{}, nil
	}
	cr, err := a.credential(ctx)
	if err != nil {
		return nil, err
	}
	if cr.cert == nil {
		return &tls.Certificate{}, nil
	}
	return cr.cert, nil
}

// credential is the plugin's credential: the cached one until it
// expires, else a fresh run.
func (a *authenticator) credential(ctx context.Context) (*credential, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cached != nil && (a.cached.expires.IsZero() || a.now().Before(a.cached.expires)) {
		return a.cached, nil
	}
	cr, err := a.run(ctx)
	if err != nil {
		return nil, err
	}
	a.cached = cr
	return cr, nil
}

// refused drops the cached credential when the server refused a
// request that carried token (client-go's refresh on 401).
func (a *authenticator) refused(token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cached != nil && a.cached.token == token {
		a.cached = nil
	}
}

// run runs the plugin: stdin /dev/null, stdout the credential, stderr
// kept for the error.
func (a *authenticator) run(ctx context.Context) (*credential, error) {
	e := a.c.Exec
	env, err := ExecPluginEnv(a.c, a.env)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, e.Command, e.Args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &limited{w: &stderr, n: 4096}
	if err := cmd.Run(); err != nil {
		msg := fmt.Sprintf("exec plugin %s: %v", e.Command, err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			if e.InstallHint != "" {
				msg += ": " + strings.TrimSpace(e.InstallHint)
			}
		}
		if s := strings.TrimSpace(stderr.String()); s != "" {
			msg += ": " + s
		}
		return nil, fmt.Errorf("%s: %w", msg, errPlugin)
	}
	cr, err := parseExecCredential(stdout.Bytes(), e.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("exec plugin %s: %w", e.Command, err)
	}
	return cr, nil
}

// errPlugin marks a plugin that did not run to success.
var errPlugin = errors.New("the credential plugin failed")

// limited keeps the first n bytes written to it and drops the rest.
type limited struct {
	w interface{ Write([]byte) (int, error) }
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// authHeaders sets the identity's headers on h and returns the token
// it used.
func (a *authenticator) authHeaders(ctx context.Context, h http.Header) (string, error) {
	tok, err := a.token(ctx)
	if err != nil {
		return "", err
	}
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	im := a.c.Impersonate
	if im.User != "" {
		h.Set("Impersonate-User", im.User)
	}
	if im.UID != "" {
		h.Set("Impersonate-Uid", im.UID)
	}
	for _, g := range im.Groups {
		h.Add("Impersonate-Group", g)
	}
	return tok, nil
}
