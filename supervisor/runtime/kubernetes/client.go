package kubernetes

// A small client of the Kubernetes API on net/http: the five calls the
// runtime makes (create, get, list, delete pods; a self access review)
// and the attach over WebSocket. client-go would carry the same calls
// at the price of tens of megabytes: the supervisor (CGO_ENABLED=0 go
// build, default flags) is 13.6 MB without this runtime, 19.5 MB with
// it, and 54.0 MB when it also links client-go v0.37.2's clientset,
// clientcmd and remotecommand.

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
)

// Client talks to one API server.
type Client struct {
	c     *Cluster
	http  *http.Client
	token string
}

// NewClient makes a client for c.
func NewClient(c *Cluster) (*Client, error) {
	tc, err := c.TLS()
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second, Proxy: nil}
	return &Client{c: c, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}, token: c.Token}, nil
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
	if k.token != "" {
		req.Header.Set("Authorization", "Bearer "+k.token)
	}
	resp, err := k.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
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
