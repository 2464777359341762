package docker

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"deathwatch/supervisor"
)

// Copy-in through the Engine API's archive endpoint (PUT
// /containers/{id}/archive, what docker cp uses): the engine extracts
// the host's tar stream into the created box's file system itself, so
// the data never crosses the attach stream (slow: it is the engine's
// stdin relay). The watcher verifies what landed before the agent
// starts (shared.CopyReceiver.Landed). Only where the API is reached:
// the CLI fallback (an ssh:// context, no podman service) keeps frames.

// CanPutArchive reports whether this engine is driven through its API.
func (e *Engine) CanPutArchive(ctx context.Context) bool { return e.client(ctx) != nil }

// PutArchive extracts the tar stream r at dir of the created box b.
func (e *Engine) PutArchive(ctx context.Context, b *supervisor.Box, dir string, r io.Reader) error {
	c := e.client(ctx)
	if c == nil {
		return supervisor.SetupError("copy-in: the engine's API is not reached")
	}
	return c.putArchive(ctx, b.Name, dir, r)
}

func (c *apiClient) putArchive(ctx context.Context, name, dir string, r io.Reader) error {
	u := c.url(containerPath(name, "/archive"), url.Values{"path": {dir}, "noOverwriteDirNonDir": {"true"}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.hc.Do(req)
	if err != nil {
		return supervisor.SetupError("copy-in: put the archive into box %s: %v", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return supervisor.SetupError("copy-in: put the archive into box %s: %v", name, readAPIError(resp))
	}
	io.Copy(io.Discard, resp.Body)
	return nil
}
