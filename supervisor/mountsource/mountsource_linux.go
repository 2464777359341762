// Package mountsource checks a --mount source before an engine that resolves
// the path again in its own process is handed it.
package mountsource

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"deathwatch/shared/boxinit"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/trusted"
)

// Check refuses (243), before anything is created, a
// --mount source an engine would be handed as a path string: one that
// passes through a symlink (the native runtime's rule, openat2 with
// RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS: boxinit.OpenHostSource), or
// one whose way there someone else could change after this check.
//
// An engine's daemon (dockerd, sbx) resolves the path again in its own
// process (a /proc/self/fd/N path would name its descriptors, not ours),
// so the check holds only while nobody but this uid or root can change
// the way: every folder from / down to the source's parent is theirs and
// writable by nobody else (in a root-owned sticky folder such as /tmp,
// where only an entry's owner may rename it, the source itself must be
// ours or root's). A box's ids are neither; the source's contents may be
// the box's.
func Check(ms []supervisor.Mount) error {
	euid := uint32(os.Geteuid())
	for _, m := range ms {
		fd, err := boxinit.OpenHostSource(m.Source)
		if err != nil {
			return exitcode.Refused("%w", err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return exitcode.Setup("mount source %s: %w", m.Source, os.NewSyscallError("fstat", err))
		}
		if m.Source == "/" {
			continue
		}
		sticky, err := trusted.CheckFoldersAbove(m.Source, euid)
		if err == nil && sticky && st.Uid != euid && st.Uid != 0 {
			err = fmt.Errorf("%s is owned by uid %d in a folder anyone may write to: its owner can swap it for a link", m.Source, st.Uid)
		}
		if err != nil {
			return exitcode.Refused("mount source %s: %w; the engine resolves the path again after this check, so mount a folder whose way there only you or root can change", m.Source, err)
		}
	}
	return nil
}
