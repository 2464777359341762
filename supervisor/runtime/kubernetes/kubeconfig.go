package kubernetes

// The kubeconfig as kubectl reads it (client-go's clientcmd loading
// rules, written here so that no runtime's start pays for client-go's
// package initialisation):
//   - the files are $KUBECONFIG's list (empty entries and repeats
//     dropped), else ~/.kube/config; a missing file is skipped, one that
//     does not parse is an error;
//   - the first file that names a cluster, context or user wins that
//     name whole, and the first that sets current-context wins it;
//   - a relative path in a file (certificates, keys, tokenFile, an exec
//     command with a '/') is relative to that file's folder;
//   - --kube-context and --kube-namespace override the context's (the
//     namespace defaults to "default");
//   - with no kubeconfig file at all, a pod's service account.

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"deathwatch/supervisor/exitcode"
)

// Overrides are what kubectl's --context and --namespace override.
type Overrides struct {
	Context   string
	Namespace string
}

// The parts of a kubeconfig file the runtime reads.
type (
	kubeconfigFile struct {
		CurrentContext string `yaml:"current-context"`
		Clusters       []struct {
			Name    string       `yaml:"name"`
			Cluster clusterEntry `yaml:"cluster"`
		} `yaml:"clusters"`
		Contexts []struct {
			Name    string       `yaml:"name"`
			Context contextEntry `yaml:"context"`
		} `yaml:"contexts"`
		Users []struct {
			Name string    `yaml:"name"`
			User userEntry `yaml:"user"`
		} `yaml:"users"`
	}
	clusterEntry struct {
		Server        string `yaml:"server"`
		CA            string `yaml:"certificate-authority"`
		CAData        string `yaml:"certificate-authority-data"`
		Insecure      bool   `yaml:"insecure-skip-tls-verify"`
		TLSServerName string `yaml:"tls-server-name"`
		ProxyURL      string `yaml:"proxy-url"`
	}
	contextEntry struct {
		Cluster   string `yaml:"cluster"`
		User      string `yaml:"user"`
		Namespace string `yaml:"namespace"`
	}
	userEntry struct {
		Cert      string      `yaml:"client-certificate"`
		CertData  string      `yaml:"client-certificate-data"`
		Key       string      `yaml:"client-key"`
		KeyData   string      `yaml:"client-key-data"`
		Token     string      `yaml:"token"`
		TokenFile string      `yaml:"tokenFile"`
		Exec      *ExecConfig `yaml:"exec"`
		Auth      any         `yaml:"auth-provider"`
		Username  string      `yaml:"username"`
		Password  string      `yaml:"password"`
		As        string      `yaml:"as"`
		AsUID     string      `yaml:"as-uid"`
		AsGroups  []string    `yaml:"as-groups"`
	}
)

// ExecConfig is a user's exec credential plugin (the
// client.authentication.k8s.io protocol).
type ExecConfig struct {
	APIVersion         string    `yaml:"apiVersion"`
	Command            string    `yaml:"command"`
	Args               []string  `yaml:"args"`
	Env                []ExecEnv `yaml:"env"`
	InstallHint        string    `yaml:"installHint"`
	ProvideClusterInfo bool      `yaml:"provideClusterInfo"`
	InteractiveMode    string    `yaml:"interactiveMode"`
}

// ExecEnv is one variable the plugin gets on top of the supervisor's
// environment.
type ExecEnv struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// origin is an entry with the folder of the file that defined it.
type origin[T any] struct {
	v   T
	dir string
}

// kubeconfig is the merge of the files kubectl would read.
type kubeconfig struct {
	files          []string // the files that were read, in order
	currentContext string
	clusters       map[string]origin[clusterEntry]
	contexts       map[string]origin[contextEntry]
	users          map[string]origin[userEntry]
}

// KubeconfigFiles is kubectl's precedence list: $KUBECONFIG's entries
// (empty ones and repeats dropped), else home's .kube/config ("" home:
// none).
func KubeconfigFiles(kubeconfigVar, home string) []string {
	if kubeconfigVar != "" {
		var out []string
		for _, f := range filepath.SplitList(kubeconfigVar) {
			if f != "" && !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
		return out
	}
	if home == "" {
		return nil
	}
	return []string{filepath.Join(home, ".kube", "config")}
}

// loadKubeconfig reads and merges files; a missing file is skipped.
func loadKubeconfig(files []string) (*kubeconfig, error) {
	k := &kubeconfig{clusters: map[string]origin[clusterEntry]{}, contexts: map[string]origin[contextEntry]{}, users: map[string]origin[userEntry]{}}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", f, err)
		}
		var doc kubeconfigFile
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("kubeconfig %s is not a kubeconfig: %w", f, err)
		}
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", f, err)
		}
		dir := filepath.Dir(abs)
		k.files = append(k.files, f)
		if k.currentContext == "" {
			k.currentContext = doc.CurrentContext
		}
		for _, c := range doc.Clusters {
			if _, ok := k.clusters[c.Name]; !ok {
				k.clusters[c.Name] = origin[clusterEntry]{c.Cluster, dir}
			}
		}
		for _, c := range doc.Contexts {
			if _, ok := k.contexts[c.Name]; !ok {
				k.contexts[c.Name] = origin[contextEntry]{c.Context, dir}
			}
		}
		for _, u := range doc.Users {
			if _, ok := k.users[u.Name]; !ok {
				k.users[u.Name] = origin[userEntry]{u.User, dir}
			}
		}
	}
	return k, nil
}

// inDir is p relative to dir unless it is absolute ("" stays "").
func inDir(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// dataOrFile is base64 data when set, else the file's content.
func dataOrFile(data, path, what string) ([]byte, error) {
	switch {
	case data != "":
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return nil, fmt.Errorf("%s-data is not base64: %w", what, err)
		}
		return b, nil
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return b, nil
	}
	return nil, nil
}

// resolve is the cluster and identity of the context o picks.
func (k *kubeconfig) resolve(o Overrides) (*Cluster, error) {
	name := o.Context
	if name == "" {
		name = k.currentContext
	}
	files := strings.Join(k.files, ", ")
	if name == "" {
		return nil, fmt.Errorf("kubeconfig %s: no current-context: pass --kube-context NAME", files)
	}
	ctx, ok := k.contexts[name]
	if !ok && o.Context != "" {
		// The flag (or its variable) names it: a bad argument.
		return nil, exitcode.Usage("--kube-context %s: kubeconfig %s has no such context (`kubectl config get-contexts` lists them)", name, files)
	}
	if !ok {
		return nil, fmt.Errorf("kubeconfig %s: no context %q", files, name)
	}
	cl, ok := k.clusters[ctx.v.Cluster]
	if !ok {
		return nil, fmt.Errorf("kubeconfig %s: context %q names cluster %q, which no file defines", files, name, ctx.v.Cluster)
	}
	c := &Cluster{
		Context: name, Server: strings.TrimRight(cl.v.Server, "/"), Insecure: cl.v.Insecure,
		TLSServerName: cl.v.TLSServerName, ProxyURL: cl.v.ProxyURL, Namespace: ctx.v.Namespace,
	}
	if o.Namespace != "" {
		c.Namespace = o.Namespace
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if u, err := url.Parse(c.Server); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("cluster %q: server %q is not an https:// URL (the control stream and the agent's secrets ride this connection)", ctx.v.Cluster, c.Server)
	}
	var err error
	if c.CA, err = dataOrFile(cl.v.CAData, inDir(cl.dir, cl.v.CA), "certificate-authority"); err != nil {
		return nil, fmt.Errorf("cluster %q: %w", ctx.v.Cluster, err)
	}
	if c.Insecure && len(c.CA) > 0 {
		return nil, fmt.Errorf("cluster %q: a certificate authority and insecure-skip-tls-verify exclude each other; drop one", ctx.v.Cluster)
	}
	if c.ProxyURL != "" {
		if _, err := proxyURL(c.ProxyURL); err != nil {
			return nil, fmt.Errorf("cluster %q: %w", ctx.v.Cluster, err)
		}
	}
	if ctx.v.User == "" {
		return c, nil
	}
	us, ok := k.users[ctx.v.User]
	if !ok {
		return nil, fmt.Errorf("kubeconfig %s: context %q names user %q, which no file defines", files, name, ctx.v.User)
	}
	if err := c.setUser(us.v, us.dir); err != nil {
		return nil, fmt.Errorf("user %q: %w", ctx.v.User, err)
	}
	return c, nil
}

// setUser takes the identity of user u (its paths relative to dir).
func (c *Cluster) setUser(u userEntry, dir string) error {
	switch {
	case u.Auth != nil:
		return errors.New("auth-provider credentials are not supported (client-go has dropped gcp and azure); use the provider's exec plugin (gke-gcloud-auth-plugin, kubelogin, ...)")
	case u.Username != "" || u.Password != "":
		return errors.New("username/password credentials are not supported; use a client certificate, a token or an exec plugin")
	}
	var err error
	if c.CertPEM, err = dataOrFile(u.CertData, inDir(dir, u.Cert), "client-certificate"); err != nil {
		return err
	}
	if c.KeyPEM, err = dataOrFile(u.KeyData, inDir(dir, u.Key), "client-key"); err != nil {
		return err
	}
	if (len(c.CertPEM) > 0) != (len(c.KeyPEM) > 0) {
		return errors.New("a client certificate needs its key and a key its certificate")
	}
	c.Token, c.TokenFile = u.Token, inDir(dir, u.TokenFile)
	if c.Token == "" && c.TokenFile != "" {
		if _, err := readToken(c.TokenFile); err != nil {
			return err
		}
	}
	c.Impersonate = Impersonation{User: u.As, UID: u.AsUID, Groups: u.AsGroups}
	if u.Exec != nil {
		e := *u.Exec
		if strings.ContainsRune(e.Command, filepath.Separator) {
			e.Command = inDir(dir, e.Command)
		}
		if err := checkExec(&e); err != nil {
			return err
		}
		c.Exec = &e
	}
	return nil
}

// readToken reads a token file (trimmed).
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("tokenFile: %w", err)
	}
	return string(bytes.TrimSpace(b)), nil
}
