package docker

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// Copies through the Engine API's archive endpoint (what docker cp
// uses). Copy-in (PUT /containers/{id}/archive): the engine extracts
// the host's tar stream into the box's file system itself (the box
// runs, its watcher waiting before the agent), so
// the data never crosses the attach stream (slow: it is the engine's
// stdin relay). The watcher verifies what landed before the agent
// starts (shared.CopyReceiver.Landed). Copy-out (GET
// /containers/{id}/archive): the engine reads the box's tree as a tar
// stream, and the host keeps of it only what the watcher's manifest
// names and hashes (supervisor/copy/archive_out_linux.go). Only where
// the API is reached: the CLI fallback (an ssh:// context, no podman
// service) keeps frames.

// CanPutArchive reports whether this engine is driven through its API.
func (e *Engine) CanPutArchive(ctx context.Context) bool { return e.client(ctx) != nil }

// PutArchive extracts the tar stream r at dir of box b.
func (e *Engine) PutArchive(ctx context.Context, b *supervisor.Box, dir string, r io.Reader) error {
	c := e.client(ctx)
	if c == nil {
		return exitcode.Setup("copy-in: the engine's API is not reached")
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
		return exitcode.Setup("copy-in: put the archive into box %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return exitcode.Setup("copy-in: put the archive into box %s: %v", name, readAPIError(resp))
	}
	io.Copy(io.Discard, resp.Body)
	return nil
}

// CanGetArchive reports whether copy-out can read the box's trees by
// the API: Docker's engine only. (Podman's archive is its own copier,
// whose entry order and hard links the host's reader was not proven
// against: podman copies out in frames.)
func (e *Engine) CanGetArchive(ctx context.Context) bool {
	return e.Kind == "docker" && e.client(ctx) != nil
}

// GetArchive reads the file or tree at p of box b as a tar stream.
func (e *Engine) GetArchive(ctx context.Context, b *supervisor.Box, p string) (io.ReadCloser, error) {
	c := e.client(ctx)
	if c == nil {
		return nil, exitcode.Setup("copy-out: the engine's API is not reached")
	}
	return c.getArchive(ctx, b.Name, p)
}

func (c *apiClient) getArchive(ctx context.Context, name, p string) (io.ReadCloser, error) {
	u := c.url(containerPath(name, "/archive"), url.Values{"path": {p}})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("copy-out: read %s of box %s: %w", p, name, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, fmt.Errorf("copy-out: read %s of box %s: %w", p, name, readAPIError(resp))
	}
	return resp.Body, nil
}
