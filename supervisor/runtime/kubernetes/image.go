package kubernetes

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// NodeRequest reads one node (its status lists the images it holds).
func NodeRequest(name string) Request {
	return Request{Method: http.MethodGet, Path: "/api/v1/nodes/" + url.PathEscape(name)}
}

// imageNames is how the kubelet may list ref: as given, and as the
// registry's normalized name (docker.io/library/busybox:1 for busybox:1).
func imageNames(ref string) []string {
	names := []string{ref}
	first, _, hasSlash := strings.Cut(ref, "/")
	if !hasSlash {
		names = append(names, "docker.io/library/"+ref)
	} else if !strings.ContainsAny(first, ".:") && first != "localhost" {
		names = append(names, "docker.io/"+ref)
	}
	if !strings.ContainsAny(ref[strings.LastIndex(ref, "/")+1:], ":@") {
		for _, n := range append([]string(nil), names...) {
			names = append(names, n+":latest")
		}
	}
	return names
}

// NodeHasImage reports whether node's status lists ref. checkable is
// false when this identity may not read the node (the minimal Role
// does not grant it): nothing is known then.
func (k *Client) NodeHasImage(ctx context.Context, node, ref string) (has, checkable bool, err error) {
	var n struct {
		Status struct {
			Images []struct {
				Names []string `json:"names"`
			} `json:"images"`
		} `json:"status"`
	}
	if err := k.Do(ctx, NodeRequest(node), &n); err != nil {
		var a *APIError
		if errors.As(err, &a) && (a.Code == http.StatusForbidden || a.Code == http.StatusNotFound) {
			return false, false, nil
		}
		return false, false, err
	}
	want := map[string]bool{}
	for _, name := range imageNames(ref) {
		want[name] = true
	}
	for _, img := range n.Status.Images {
		for _, name := range img.Names {
			if want[name] {
				return true, true, nil
			}
		}
	}
	return false, true, nil
}
