package kubernetes

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"deathwatch/shared"
)

func TestParseExecCredential(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name, out, err string
		check          func(*credential) bool
	}{
		{"token and expiry", `{"apiVersion":"` + execV1 + `","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"2030-01-02T03:04:05Z"}}`, "",
			func(c *credential) bool { return c.token == "t" && c.expires.Equal(exp) && c.cert == nil }},
		{"no expiry", `{"apiVersion":"` + execV1 + `","kind":"ExecCredential","status":{"token":"t"}}`, "",
			func(c *credential) bool { return c.expires.IsZero() }},
		{"another apiVersion", `{"apiVersion":"` + execV1beta1 + `","kind":"ExecCredential","status":{"token":"t"}}`, "answered in", nil},
		{"another kind", `{"apiVersion":"` + execV1 + `","kind":"Secret","status":{"token":"t"}}`, "not ExecCredential", nil},
		{"no status", `{"apiVersion":"` + execV1 + `","kind":"ExecCredential"}`, "no status", nil},
		{"nothing in status", `{"apiVersion":"` + execV1 + `","kind":"ExecCredential","status":{}}`, "neither a token", nil},
		{"a certificate without its key", `{"apiVersion":"` + execV1 + `","kind":"ExecCredential","status":{"clientCertificateData":"x"}}`, "without its key", nil},
		{"not JSON", `please log in`, "not an ExecCredential", nil},
	} {
		c, err := parseExecCredential([]byte(tc.out), execV1)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !tc.check(c) {
			t.Errorf("%s: %+v, %v", tc.name, c, err)
		}
	}
}

func TestExecPluginEnv(t *testing.T) {
	c := &Cluster{Server: "https://k:6443", CA: []byte("CA"), TLSServerName: "api", ProxyURL: "http://p:1",
		Exec: &ExecConfig{APIVersion: execV1, Command: "p", Env: []ExecEnv{{"A", "kubeconfig"}}, ProvideClusterInfo: true}}
	env, err := ExecPluginEnv(c, []string{"A=engine", "HOME=/h"})
	if err != nil {
		t.Fatal(err)
	}
	if len(env) != 4 || env[0] != "A=engine" || env[2] != "A=kubeconfig" || !strings.HasPrefix(env[3], execInfoEnv+"=") {
		t.Fatalf("env = %q: want the engine's, then the kubeconfig's (later wins), then %s", env, execInfoEnv)
	}
	var info struct {
		APIVersion, Kind string
		Spec             struct {
			Interactive bool
			Cluster     map[string]any
		}
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(env[3], execInfoEnv+"=")), &info); err != nil {
		t.Fatal(err)
	}
	if info.APIVersion != execV1 || info.Kind != "ExecCredential" || info.Spec.Interactive ||
		info.Spec.Cluster["server"] != "https://k:6443" || info.Spec.Cluster["certificate-authority-data"] != "Q0E=" ||
		info.Spec.Cluster["tls-server-name"] != "api" || info.Spec.Cluster["proxy-url"] != "http://p:1" {
		t.Errorf("%s = %+v", execInfoEnv, info)
	}
	c.Exec.ProvideClusterInfo = false
	env, _ = ExecPluginEnv(c, nil)
	if strings.Contains(env[len(env)-1], "cluster") {
		t.Errorf("the cluster went to a plugin that did not ask for it: %s", env[len(env)-1])
	}
}

// plugin writes an exec credential plugin script into dir: it appends a
// line to dir/runs, saves its environment and stdin, and answers with
// the token in dir/token and the expiry in dir/exp.
func plugin(t *testing.T, dir, token, exp string) string {
	t.Helper()
	writeFiles(t, dir, map[string]string{"token": token, "exp": exp})
	script := `#!/bin/sh
d=$(dirname "$0")
echo run >> "$d/runs"
env > "$d/env"
cat > "$d/stdin"
exp=$(cat "$d/exp")
[ -n "$exp" ] && exp=",\"expirationTimestamp\":\"$exp\""
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"%s}}' "$(cat "$d/token")" "$exp"
`
	p := filepath.Join(dir, "plug")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func runs(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "runs"))
	return strings.Count(string(b), "run")
}

func TestExecPluginAgainstFakeAPI(t *testing.T) {
	f, srv := newFake(t)
	// The command is relative to the kubeconfig's folder.
	kc := kubeconfigWith(t, srv, `{exec: {apiVersion: client.authentication.k8s.io/v1, command: ./plug, interactiveMode: Never, env: [{name: FROM_KUBECONFIG, value: "yes"}]}}`, "")
	dir := filepath.Dir(kc)
	plugin(t, dir, f.token, "")
	rt, _ := newRuntime(t, "KUBECONFIG="+kc, EnvNamespace+"=ns", "HOME="+dir)
	ctx := context.Background()
	if _, err := rt.Probe(ctx); err != nil {
		t.Fatalf("Probe with the plugin's token: %v", err)
	}
	if n := runs(dir); n != 1 {
		t.Errorf("the plugin ran %d times for one probe; a credential without expiry is kept", n)
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	if !strings.Contains(string(env), "FROM_KUBECONFIG=yes") || !strings.Contains(string(env), execInfoEnv+`={"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}`) {
		t.Errorf("the plugin's environment lacks the kubeconfig's env or %s:\n%s", execInfoEnv, env)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "stdin")); len(b) != 0 {
		t.Errorf("the plugin read %q on its stdin", b)
	}
	// The attach carries the plugin's token too.
	b := testBox()
	if err := rt.Prepare(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := rt.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	st, err := rt.Start(ctx, b)
	if err != nil {
		t.Fatalf("Start (the attach) with the plugin's token: %v", err)
	}
	shared.NewWriter(st.Control).Send(shared.FramePing, []byte("x"))
	if fr, err := shared.NewReader(st.Control).Next(); err != nil || fr.Type != shared.FramePing {
		t.Fatalf("echo through the attach: %+v, %v", fr, err)
	}
	st.Control.Close()
	st.Wait()

	// The server stops taking the token: the 401 drops the cached
	// credential, and the next request runs the plugin again.
	f.mu.Lock()
	f.token = "rotated"
	f.mu.Unlock()
	before := runs(dir)
	writeFiles(t, dir, map[string]string{"token": "rotated"})
	if _, err := rt.Exists(ctx, b); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Exists with the old token = %v, want 401", err)
	}
	if _, err := rt.Exists(ctx, b); err != nil {
		t.Fatalf("Exists after the 401: %v (the plugin's new token was not fetched)", err)
	}
	if n := runs(dir) - before; n != 1 {
		t.Errorf("the plugin ran %d times after the 401, want 1", n)
	}

	// An expired credential is fetched again for each request.
	writeFiles(t, dir, map[string]string{"exp": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)})
	rt2, _ := newRuntime(t, "KUBECONFIG="+kc, EnvNamespace+"=ns", "HOME="+dir)
	before = runs(dir)
	rt2.Exists(ctx, b)
	rt2.Exists(ctx, b)
	if n := runs(dir) - before; n != 2 {
		t.Errorf("with an expired credential the plugin ran %d times for two requests, want 2", n)
	}
	writeFiles(t, dir, map[string]string{"exp": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	rt3, _ := newRuntime(t, "KUBECONFIG="+kc, EnvNamespace+"=ns", "HOME="+dir)
	before = runs(dir)
	rt3.Exists(ctx, b)
	rt3.Exists(ctx, b)
	if n := runs(dir) - before; n != 1 {
		t.Errorf("with a credential valid for an hour the plugin ran %d times for two requests, want 1", n)
	}
}

func TestExecPluginFailureSaysWhy(t *testing.T) {
	_, srv := newFake(t)
	kc := kubeconfigWith(t, srv, `{exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: deathwatch-no-such-plugin, installHint: "install it with: apt install it"}}`, "")
	rt, _ := newRuntime(t, "KUBECONFIG="+kc, "PATH=/usr/bin:/bin")
	_, err := rt.Probe(context.Background())
	if err == nil || !strings.Contains(err.Error(), "deathwatch-no-such-plugin") || !strings.Contains(err.Error(), "apt install it") {
		t.Errorf("Probe with a missing plugin = %v; want its name and its installHint", err)
	}
}

// connectProxy is an HTTP CONNECT proxy that counts its tunnels.
func connectProxy(t *testing.T) (string, *atomic.Int32) {
	var n atomic.Int32
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil || req.Method != http.MethodConnect {
					return
				}
				up, err := net.Dial("tcp", req.Host)
				if err != nil {
					io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
					return
				}
				defer up.Close()
				n.Add(1)
				io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
				go io.Copy(up, c)
				io.Copy(c, up)
			}()
		}
	}()
	return "http://" + l.Addr().String(), &n
}

func TestProxyURLCarriesRESTAndAttach(t *testing.T) {
	f, srv := newFake(t)
	proxy, tunnels := connectProxy(t)
	kc := kubeconfigWith(t, srv, "{token: "+f.token+"}", "    proxy-url: "+proxy+"\n")
	rt, _ := newRuntime(t, "KUBECONFIG="+kc, EnvNamespace+"=ns")
	ctx := context.Background()
	if _, err := rt.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	rest := tunnels.Load()
	if rest == 0 {
		t.Fatal("the API calls did not go through the cluster's proxy-url")
	}
	b := testBox()
	rt.Prepare(ctx, b)
	if err := rt.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	st, err := rt.Start(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	st.Control.Close()
	st.Wait()
	if tunnels.Load() == rest {
		t.Error("the attach did not go through the cluster's proxy-url")
	}
}

func TestProxyFunc(t *testing.T) {
	req := func(u string) *http.Request { r, _ := http.NewRequest("GET", u, nil); return r }
	for _, tc := range []struct {
		env        []string
		target     string
		want       string
		clusterURL string
	}{
		{[]string{"HTTPS_PROXY=http://p:3128"}, "https://api.example:6443/version", "http://p:3128", ""},
		{[]string{"https_proxy=http://lower:3128"}, "https://api.example:6443/", "http://lower:3128", ""},
		{[]string{"HTTPS_PROXY=http://p:3128", "NO_PROXY=.example"}, "https://api.example:6443/", "", ""},
		{[]string{"HTTPS_PROXY=http://p:3128", "NO_PROXY=10.0.0.0/8"}, "https://10.1.2.3:6443/", "", ""},
		{[]string{"HTTP_PROXY=http://p:3128"}, "https://api.example:6443/", "", ""},
		{[]string{"HTTPS_PROXY=http://p:3128", "NO_PROXY=*"}, "https://api.example/", "socks5://s:1080", "socks5://s:1080"},
	} {
		f, err := ProxyFunc(&Cluster{ProxyURL: tc.clusterURL}, tc.env)
		if err != nil {
			t.Fatal(err)
		}
		u, err := f(req(tc.target))
		got := ""
		if u != nil {
			got = u.String()
		}
		if err != nil || got != tc.want {
			t.Errorf("%v %s: proxy %q, %v; want %q", tc.env, tc.target, got, err, tc.want)
		}
	}
	if _, err := ProxyFunc(&Cluster{ProxyURL: "ftp://x"}, nil); err == nil {
		t.Error("ProxyFunc took an ftp:// proxy-url")
	}
}
