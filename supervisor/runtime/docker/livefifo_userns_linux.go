package docker

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// giveLive hands box b's live FIFO to the box's root where the box has
// a user namespace of its own (a podman service's --userns=auto): the
// engine picks the box's ids at create, so the FIFO, 0600 and the
// supervisor's until then, goes to the host uid and gid the box's root
// is, before the box starts. Its folder stays the supervisor's and lets
// other ids through without listing it (0711): the agent, another
// uid, can neither list the folder nor open the FIFO.
func (e *Engine) giveLive(ctx context.Context, c *apiClient, b *supervisor.Box) error {
	lf := e.live(b.Name)
	if lf == nil || lf.dir == "" || e.Kind != "podman" || !e.usernsAuto {
		return nil
	}
	var r struct {
		HostConfig struct {
			IDMappings struct{ UidMap, GidMap []string }
		}
	}
	if _, err := c.do(ctx, http.MethodGet, "/libpod/containers/"+b.Name+"/json", nil, nil, &r); err != nil {
		return exitcode.Setup("read the id maps of box %s: %w", b.Name, err)
	}
	uid, uok := rootIn(r.HostConfig.IDMappings.UidMap)
	gid, gok := rootIn(r.HostConfig.IDMappings.GidMap)
	if !uok || !gok {
		return exitcode.Setup("box %s: its id maps %q %q map no root for its live FIFO", b.Name, r.HostConfig.IDMappings.UidMap, r.HostConfig.IDMappings.GidMap)
	}
	dfd, err := unix.Openat2(unix.AT_FDCWD, lf.dir, &unix.OpenHow{
		Flags:   unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_RDONLY,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return exitcode.Setup("give box %s its live FIFO: %w", b.Name, &os.PathError{Op: "open", Path: lf.dir, Err: err})
	}
	defer unix.Close(dfd)
	if err := unix.Fchownat(dfd, LiveFIFOName, int(uid), int(gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return exitcode.Setup("give box %s its live FIFO: %w", b.Name, &os.PathError{Op: "chown", Path: filepath.Join(lf.dir, LiveFIFOName), Err: err})
	}
	if err := unix.Fchmod(dfd, 0o711); err != nil {
		return exitcode.Setup("give box %s its live FIFO: %w", b.Name, &os.PathError{Op: "chmod", Path: lf.dir, Err: err})
	}
	return nil
}

// rootIn is the host id that id 0 maps to in an engine's id map
// ("inside:outside:count" entries, podman inspect's IDMappings).
func rootIn(m []string) (uint32, bool) {
	for _, e := range m {
		f := strings.Split(e, ":")
		if len(f) != 3 || f[0] != "0" {
			continue
		}
		out, err1 := strconv.ParseUint(f[1], 10, 32)
		n, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 == nil && err2 == nil && n > 0 {
			return uint32(out), true
		}
	}
	return 0, false
}
