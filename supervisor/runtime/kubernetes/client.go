package kubernetes

// A small client of the Kubernetes API on net/http: the calls the
// runtime makes (create, get, list, delete pods; a self access review)
// and the attach over WebSocket, with the kubeconfig's identity
// (credential.go) and proxy. client-go would carry the same calls, but
// linking it costs every start of the supervisor, on every runtime, its
// packages' initialisation.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// Client talks to one API server.
type Client struct {
	c     *Cluster
	auth  *authenticator
	proxy func(*http.Request) (*url.URL, error)
	http  *http.Client
}

// NewClient makes a client for c; env is the engine environment (the
// proxy variables, an exec plugin's environment; nil: the process's).
func NewClient(c *Cluster, env []string) (*Client, error) {
	auth := newAuthenticator(c, env)
	tc, err := c.TLS(auth)
	if err != nil {
		return nil, err
	}
	proxy, err := ProxyFunc(c, env)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second, Proxy: proxy}
	return &Client{c: c, auth: auth, proxy: proxy, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}, nil
}

// ProxyFunc is the proxy for requests to c's server: the cluster's
// proxy-url, else HTTPS_PROXY / HTTP_PROXY / NO_PROXY (or their lower-case
// spellings) of env (nil: the process's environment), as kubectl.
func ProxyFunc(c *Cluster, env []string) (func(*http.Request) (*url.URL, error), error) {
	if c.ProxyURL != "" {
		u, err := proxyURL(c.ProxyURL)
		if err != nil {
			return nil, err
		}
		return http.ProxyURL(u), nil
	}
	either := func(a, b string) string {
		if v := getenv(env, a); v != "" {
			return v
		}
		return getenv(env, b)
	}
	f := (&httpproxy.Config{
		HTTPProxy:  either("HTTP_PROXY", "http_proxy"),
		HTTPSProxy: either("HTTPS_PROXY", "https_proxy"),
		NoProxy:    either("NO_PROXY", "no_proxy"),
	}).ProxyFunc()
	return func(r *http.Request) (*url.URL, error) { return f(r.URL) }, nil
}

// proxyURL parses a proxy-url: http, https or socks5.
func proxyURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("proxy-url %q: %w", s, err)
	}
	switch u.Scheme {
	case "http", "https", "socks5":
	default:
		return nil, fmt.Errorf("proxy-url %q: want an http://, https:// or socks5:// URL", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("proxy-url %q names no host", s)
	}
	return u, nil
}

// APIError is a non-2xx answer; Code is the HTTP status.
type APIError struct {
	Code    int
	Reason  string
	Message string
}

func (e *APIError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("%s (%d %s)", e.Message, e.Code, e.Reason)
	}
	return fmt.Sprintf("HTTP %d %s", e.Code, e.Reason)
}

// IsNotFound reports a 404.
func IsNotFound(err error) bool {
	var a *APIError
	return errors.As(err, &a) && a.Code == http.StatusNotFound
}

// Request is one API call as plain data (built by the pure functions
// below, which have a table test).
type Request struct {
	Method string
	Path   string
	Query  url.Values
	Body   any
}

func podsPath(ns string) string { return "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods" }

// CreatePodRequest creates p in its namespace.
func CreatePodRequest(p Pod) Request {
	return Request{Method: http.MethodPost, Path: podsPath(p.Metadata.Namespace), Body: p}
}

// GetPodRequest reads one pod.
func GetPodRequest(ns, name string) Request {
	return Request{Method: http.MethodGet, Path: podsPath(ns) + "/" + url.PathEscape(name)}
}

// DeletePodRequest deletes one pod at once (grace period 0).
func DeletePodRequest(ns, name string) Request {
	return Request{Method: http.MethodDelete, Path: podsPath(ns) + "/" + url.PathEscape(name),
		Body: map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "propagationPolicy": "Background"}}
}

// ListPodsRequest lists the pods of ns that carry label=value.
func ListPodsRequest(ns, label, value string) Request {
	return Request{Method: http.MethodGet, Path: podsPath(ns), Query: url.Values{"labelSelector": {label + "=" + value}}}
}

// AccessReviewRequest asks whether this identity may verb resource
// (with subresource, e.g. pods/attach) in ns.
func AccessReviewRequest(ns, verb, resource, sub string) Request {
	attrs := map[string]string{"namespace": ns, "verb": verb, "resource": resource}
	if sub != "" {
		attrs["subresource"] = sub
	}
	return Request{Method: http.MethodPost, Path: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
		Body: map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
			"spec": map[string]any{"resourceAttributes": attrs}}}
}

// AttachQuery is the attach subresource's query: stdin, stdout and
// stderr of container C, no tty.
func AttachQuery(container string) url.Values {
	return url.Values{"container": {container}, "stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}}
}

// ExecQuery is the exec subresource's query: command argv in container
// C with stdin, stdout and stderr, no tty.
func ExecQuery(container string, argv []string) url.Values {
	q := AttachQuery(container)
	q["command"] = append([]string(nil), argv...)
	return q
}

// Do runs r and decodes a 2xx answer into out (nil: discarded).
func (k *Client) Do(ctx context.Context, r Request, out any) error {
	var body io.Reader
	if r.Body != nil {
		b, err := json.Marshal(r.Body)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	u := k.c.Server + r.Path
	if len(r.Query) > 0 {
		u += "?" + r.Query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	tok, err := k.auth.authHeaders(ctx, req.Header)
	if err != nil {
		return err
	}
	resp, err := k.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		k.auth.refused(tok)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var st struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &st)
		if st.Reason == "" {
			st.Reason = http.StatusText(resp.StatusCode)
		}
		if st.Message == "" {
			st.Message = strings.TrimSpace(string(data[:min(len(data), 200)]))
		}
		return &APIError{Code: resp.StatusCode, Reason: st.Reason, Message: st.Message}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: %w", r.Method, r.Path, err)
		}
	}
	return nil
}

// Version is the API server's gitVersion.
func (k *Client) Version(ctx context.Context) (string, error) {
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := k.Do(ctx, Request{Method: http.MethodGet, Path: "/version"}, &v); err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// Allowed runs a self access review.
func (k *Client) Allowed(ctx context.Context, ns, verb, resource, sub string) (bool, error) {
	var r struct {
		Status struct {
			Allowed bool `json:"allowed"`
		} `json:"status"`
	}
	if err := k.Do(ctx, AccessReviewRequest(ns, verb, resource, sub), &r); err != nil {
		return false, err
	}
	return r.Status.Allowed, nil
}

// GetPod reads one pod.
func (k *Client) GetPod(ctx context.Context, ns, name string) (*Pod, error) {
	var p Pod
	if err := k.Do(ctx, GetPodRequest(ns, name), &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ListPods lists ns's pods that carry label=value.
func (k *Client) ListPods(ctx context.Context, ns, label, value string) ([]Pod, error) {
	var l struct {
		Items []Pod `json:"items"`
	}
	if err := k.Do(ctx, ListPodsRequest(ns, label, value), &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// DeletePod deletes a pod with grace period 0; one that is gone is no
// error.
func (k *Client) DeletePod(ctx context.Context, ns, name string) error {
	if err := k.Do(ctx, DeletePodRequest(ns, name), nil); err != nil && !IsNotFound(err) {
		return err
	}
	return nil
}
