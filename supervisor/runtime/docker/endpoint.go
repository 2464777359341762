package docker

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// endpoint is where the engine's API answers, as DOCKER_HOST, a docker
// context or the defaults say.
type endpoint struct {
	Scheme string // unix | tcp | npipe | ssh | ...
	Addr   string // socket path, or host:port
	TLS    bool   // tcp with TLS
	// CertDir holds ca.pem, cert.pem, key.pem (DOCKER_CERT_PATH or the
	// context's TLS store); SkipVerify: the context says so.
	CertDir    string
	SkipVerify bool
	From       string // what named it, for messages: DOCKER_HOST, context NAME, default
}

// String is the endpoint as DOCKER_HOST spells it.
func (p endpoint) String() string { return p.Scheme + "://" + p.Addr }

// envMap turns an environment list into a lookup (the last value wins,
// as in a process's environment).
func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// parseHost reads one DOCKER_HOST-style address.
func parseHost(s string) (endpoint, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return endpoint{}, fmt.Errorf("engine address %q is not scheme://address", s)
	}
	p := endpoint{Scheme: u.Scheme}
	switch u.Scheme {
	case "unix", "npipe":
		p.Addr = u.Path
		if u.Host != "" && u.Scheme == "unix" { // unix://relative/path
			p.Addr = u.Host + u.Path
		}
		if u.Scheme == "npipe" {
			p.Addr = strings.TrimPrefix(s, "npipe://")
		}
	case "tcp", "http", "https":
		p.Addr = u.Host
		if u.Port() == "" {
			p.Addr += ":2375"
		}
		p.TLS = u.Scheme == "https"
		p.Scheme = "tcp"
	default:
		p.Addr = strings.TrimPrefix(s, u.Scheme+"://")
	}
	return p, nil
}

// dockerEndpoint works out docker's API endpoint from the environment
// and, when no DOCKER_HOST is set, the current docker context (its meta
// file under the docker config directory), as the docker CLI does.
func dockerEndpoint(env map[string]string) (endpoint, error) {
	if h := env["DOCKER_HOST"]; h != "" {
		p, err := parseHost(h)
		if err != nil {
			return p, err
		}
		p.From = "DOCKER_HOST"
		if p.Scheme == "tcp" && (env["DOCKER_TLS_VERIFY"] != "" || env["DOCKER_CERT_PATH"] != "") {
			p.TLS = true
		}
		if p.TLS {
			p.CertDir = env["DOCKER_CERT_PATH"]
			if p.CertDir == "" {
				p.CertDir = configDir(env)
			}
			p.SkipVerify = env["DOCKER_TLS_VERIFY"] == ""
		}
		return p, nil
	}
	name := env["DOCKER_CONTEXT"]
	if name == "" {
		var cfg struct{ CurrentContext string }
		if b, err := os.ReadFile(filepath.Join(configDir(env), "config.json")); err == nil {
			json.Unmarshal(b, &cfg)
		}
		name = cfg.CurrentContext
	}
	if name != "" && name != "default" {
		return contextEndpoint(configDir(env), name)
	}
	if runtime.GOOS == "windows" {
		return endpoint{Scheme: "npipe", Addr: "////./pipe/docker_engine", From: "default"}, nil
	}
	return endpoint{Scheme: "unix", Addr: "/var/run/docker.sock", From: "default"}, nil
}

// dockerHostHint is what to add to a failure to reach docker when
// nothing named the endpoint (no DOCKER_HOST, no context) and the
// rootful socket refused this user: the rootless daemon's socket is
// named by DOCKER_HOST alone. rootlessSock is $XDG_RUNTIME_DIR/docker.sock
// when it exists, else "".
func dockerHostHint(env map[string]string, failure, rootlessSock string) string {
	if env["DOCKER_HOST"] != "" || (env["DOCKER_CONTEXT"] != "" && env["DOCKER_CONTEXT"] != "default") || !strings.Contains(strings.ToLower(failure), "permission denied") {
		return ""
	}
	if rootlessSock != "" {
		return "; DOCKER_HOST is not set, so the rootful socket /var/run/docker.sock was tried: a rootless daemon of yours listens at " + rootlessSock + ", set DOCKER_HOST=unix://" + rootlessSock
	}
	return "; DOCKER_HOST is not set, so the rootful socket /var/run/docker.sock was tried: for rootless docker set DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock (dockerd-rootless-setuptool.sh prints it)"
}

// rootlessSocket is $XDG_RUNTIME_DIR/docker.sock when it exists.
func rootlessSocket(env map[string]string) string {
	d := env["XDG_RUNTIME_DIR"]
	if d == "" {
		return ""
	}
	p := filepath.Join(d, "docker.sock")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// configDir is the docker CLI's configuration directory.
func configDir(env map[string]string) string {
	if d := env["DOCKER_CONFIG"]; d != "" {
		return d
	}
	return filepath.Join(env["HOME"], ".docker")
}

// contextEndpoint reads a docker context's endpoint: its meta.json lives
// in contexts/meta/<sha256 of the name>/, its TLS files in
// contexts/tls/<same>/docker/.
func contextEndpoint(dir, name string) (endpoint, error) {
	sum := sha256.Sum256([]byte(name))
	id := hex.EncodeToString(sum[:])
	b, err := os.ReadFile(filepath.Join(dir, "contexts", "meta", id, "meta.json"))
	if err != nil {
		return endpoint{}, fmt.Errorf("docker context %q: %w", name, err)
	}
	var meta struct {
		Endpoints map[string]struct {
			Host          string
			SkipTLSVerify bool
		}
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return endpoint{}, fmt.Errorf("docker context %q: %w", name, err)
	}
	ep, ok := meta.Endpoints["docker"]
	if !ok || ep.Host == "" {
		return endpoint{}, fmt.Errorf("docker context %q names no docker endpoint", name)
	}
	p, err := parseHost(ep.Host)
	if err != nil {
		return p, err
	}
	p.From = "docker context " + name
	tlsDir := filepath.Join(dir, "contexts", "tls", id, "docker")
	if _, err := os.Stat(tlsDir); err == nil && p.Scheme == "tcp" {
		p.TLS, p.CertDir = true, tlsDir
	}
	p.SkipVerify = ep.SkipTLSVerify
	return p, nil
}

// podmanEndpoint is a Podman service socket this process may use:
// CONTAINER_HOST when it names a unix socket, else the rootful
// (/run/podman/podman.sock, as root) or rootless
// ($XDG_RUNTIME_DIR/podman/podman.sock) one when it exists. ok is false
// when there is none: then the CLI serves.
func podmanEndpoint(env map[string]string, euid int) (endpoint, bool) {
	if h := env["CONTAINER_HOST"]; h != "" {
		p, err := parseHost(h)
		if err != nil || p.Scheme != "unix" {
			return endpoint{}, false // ssh:// and the like: the CLI's own transport
		}
		p.From = "CONTAINER_HOST"
		return p, true
	}
	path := "/run/podman/podman.sock"
	if euid != 0 {
		if env["XDG_RUNTIME_DIR"] == "" {
			return endpoint{}, false
		}
		path = filepath.Join(env["XDG_RUNTIME_DIR"], "podman", "podman.sock")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return endpoint{}, false
	}
	return endpoint{Scheme: "unix", Addr: path, From: "podman service"}, true
}

// tlsConfig loads the endpoint's client certificate and CA.
func (p endpoint) tlsConfig() (*tls.Config, error) {
	c := &tls.Config{InsecureSkipVerify: p.SkipVerify, MinVersion: tls.VersionTLS12}
	if p.CertDir == "" {
		return c, nil
	}
	if ca, err := os.ReadFile(filepath.Join(p.CertDir, "ca.pem")); err == nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%s: no certificate in ca.pem", p.CertDir)
		}
		c.RootCAs = pool
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(p.CertDir, "cert.pem"), filepath.Join(p.CertDir, "key.pem"))
	if err == nil {
		c.Certificates = []tls.Certificate{cert}
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("load the engine's client certificate from %s: %w", p.CertDir, err)
	}
	return c, nil
}

// apiSocketPresent reports whether the engine's API may answer without
// its CLI: a unix socket that exists, or a tcp endpoint (a controller
// with the daemon's socket mounted in needs no CLI).
func apiSocketPresent(kind string, env []string) bool {
	if env == nil {
		env = os.Environ()
	}
	m := envMap(env)
	if kind == "podman" {
		_, ok := podmanEndpoint(m, os.Geteuid())
		return ok
	}
	p, err := dockerEndpoint(m)
	if err != nil {
		return false
	}
	if p.Scheme == "tcp" {
		return true
	}
	fi, err := os.Stat(p.Addr)
	return p.Scheme == "unix" && err == nil && fi.Mode()&os.ModeSocket != 0
}
