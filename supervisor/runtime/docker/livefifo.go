//go:build linux

package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// The live FIFO (livefifo_names.go, livefifo_fifo.go) on an engine: its folder is one
// more read-only bind (createBody); LiveKey and LiveIDs say where it may
// be offered (a Linux supervisor only).

// LiveKey names a Docker engine or a Podman service on this host's
// unix socket that runs as the supervisor's uid (a rootful daemon for a
// root supervisor, the user's rootless daemon for the user) by the
// socket's path and inode (a restarted or replaced daemon makes a new
// socket, and is proven anew). The CLI (local Podman's one-step run has
// its live pipe instead, livefd_linux.go), a tcp:// or ssh:// engine and
// a listener of another uid get no live FIFO.
func (e *Engine) LiveKey(ctx context.Context) (string, bool) {
	c := e.client(ctx)
	if c == nil || c.ep.Scheme != "unix" {
		return "", false
	}
	switch {
	case e.Kind == "docker" && dockerServerVersion(c.server) != "":
	case e.Kind == "podman" && c.libpod != "":
	default:
		return "", false
	}
	if uid, ok := c.listenerUID(); !ok || uid != os.Geteuid() {
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
	return fmt.Sprintf("%s %s dev %d ino %d", e.Kind, c.ep.Addr, s.Dev, s.Ino), true
}

// LiveIDs asks the daemon (/info) whether its boxes' root is its own
// uid, which LiveKey found to be the supervisor's: a daemon without
// userns-remap runs them as itself (a rootful one as the host's root, a
// rootless one as uid 0 of rootlesskit's namespace, its user on the
// host); a userns-remap daemon maps the box's root to an id that cannot
// open the supervisor's FIFO.
//
// A podman service's boxes' root is its own uid, the supervisor's
// (LiveKey), unless they take a user namespace of their own
// (--userns=auto): then a root supervisor gives the FIFO to the box's
// root once the engine has picked its ids (giveLive), which a user's
// supervisor cannot.
func (e *Engine) LiveIDs(ctx context.Context) (bool, error) {
	c := e.client(ctx)
	if c == nil {
		return false, errors.New("no engine API")
	}
	if e.Kind == "podman" {
		return !e.usernsAuto || os.Geteuid() == 0, nil
	}
	info, err := e.dockerInfo(ctx, c)
	if err != nil {
		return false, err
	}
	e.mu.Lock()
	remaps := e.remaps
	e.mu.Unlock()
	return info.Rootless && !remaps || info.Detail == rootfulNoUserns && os.Geteuid() == 0, nil
}
