//go:build linux

package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// The live FIFO (supervisor/livefifo.go) on an engine: its folder is one
// more read-only bind (createBody); LiveKey and LiveIDs say where it may
// be offered (a Linux supervisor only).

// LiveKey names a rootful Docker engine on this host's unix socket by
// the socket's path and inode (a restarted or replaced daemon makes a
// new socket, and is proven anew). Podman, the CLI, a tcp:// or ssh://
// engine and a listener that is not root get no live FIFO.
func (e *Engine) LiveKey(ctx context.Context) (string, bool) {
	if e.Kind != "docker" {
		return "", false
	}
	c := e.client(ctx)
	if c == nil || c.ep.Scheme != "unix" || dockerServerVersion(c.server) == "" {
		return "", false
	}
	if uid, ok := c.listenerUID(); !ok || uid != 0 {
		return "", false
	}
	st, err := os.Stat(c.ep.Addr)
	if err != nil {
		return "", false
	}
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok || st.Mode()&os.ModeSocket == 0 {
		return "", false
	}
	return fmt.Sprintf("docker %s dev %d ino %d", c.ep.Addr, s.Dev, s.Ino), true
}

// LiveIDs asks the daemon (/info) whether it keeps the host's ids: a
// rootless or userns-remap daemon maps the box's root to an id that
// cannot open a FIFO of the host's root.
func (e *Engine) LiveIDs(ctx context.Context) (bool, error) {
	c := e.client(ctx)
	if c == nil {
		return false, errors.New("no engine API")
	}
	info, err := e.dockerInfo(ctx, c)
	if err != nil {
		return false, err
	}
	return !info.Rootless && info.Detail == rootfulNoUserns, nil
}
