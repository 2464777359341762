package docker

import (
	"context"
	"fmt"
	"net/http"

	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// libpodProbe tells whether a podman service is rootless, and its
// version. A service on a local unix socket needs no question: podman
// is rootless exactly when it runs as a user other than root, and the
// socket's listener (SO_PEERCRED) says which user; the version came
// with the headers of the _ping that settled the API version. (Its /info
// is slow: podman gathers the whole host's and storage's state for it.)
// Elsewhere its libpod info says (host.security.rootless): the
// Docker-compatible /info of podman 4 names no "rootless" security
// option, so a rootless `podman system service` would read as rootful
// there and be refused.
func (e *Engine) libpodProbe(ctx context.Context, c *apiClient) (supervisor.Info, error) {
	info := supervisor.Info{Runtime: e.Kind}
	if c.ep.Scheme == "unix" {
		if uid, ok := c.listenerUID(); ok && c.libpod != "" {
			info.Present, info.Version, info.Rootless = true, c.libpod, uid != 0
			e.rootless = info.Rootless
			return info, nil
		}
	}
	var r libpodInfo
	if _, err := c.do(ctx, http.MethodGet, "/libpod/info", nil, nil, &r); err != nil {
		info.Detail = fmt.Sprintf("%s engine at %s is not usable: %v", e.Kind, c.ep, err)
		return info, exitcode.Engine("%s", info.Detail)
	}
	info.Present, info.Version, info.Rootless = true, r.Version.Version, r.Host.Security.Rootless
	e.rootless = info.Rootless
	return info, nil
}

// libpodInfo is what libpodProbe reads of GET /libpod/info.
type libpodInfo struct {
	Host struct {
		Security struct {
			Rootless bool `json:"rootless"`
		} `json:"security"`
	} `json:"host"`
	Version struct {
		Version string
	} `json:"version"`
}
