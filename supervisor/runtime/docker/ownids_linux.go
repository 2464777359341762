package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/idslot"
)

// ownIDSlots are the slots a box of an engine that runs boxes on the
// host's own ids takes its ids from: as root the reserved block that
// native boxes take theirs from too (one folder: they never share
// ids); another user (in the docker group) a block of its own above
// it, keyed by its uid, with the lock files in its runtime folder.
func ownIDSlots(euid int, env map[string]string) (*idslot.Ranges, error) {
	if euid == 0 {
		return idslot.Root(idslot.DefaultDir, "/etc"), nil
	}
	d := env["XDG_RUNTIME_DIR"]
	if !filepath.IsAbs(d) {
		return nil, fmt.Errorf("no folder for this user's box id slots: set XDG_RUNTIME_DIR, or run the supervisor as root")
	}
	const perUser = 1 << 16 // 32768 boxes of two ids
	base := int64(idslot.Base) + int64(idslot.Size)*idslot.Slots + int64(euid%16384)*perUser
	return idslot.Sub(filepath.Join(d, "deathwatch", "box-idslots"), base, base, 2, perUser/2,
		fmt.Sprintf("host ids %d-%d", base, base+perUser-1)), nil
}

// idSlots are the slots this engine's boxes take: the rootless
// daemon's (nsids_linux.go), else the host-id blocks.
func (e *Engine) idSlots() (*idslot.Ranges, error) {
	if d := e.daemonIDs; d != nil {
		return d.slots, nil
	}
	return ownIDSlots(os.Geteuid(), envMap(os.Environ()))
}

// takeOwnIDs gives box b, whose engine runs it on the host's own ids
// or on one namespace's ids for every box (rootless docker), a slot
// of ids of its own: the agent runs as the slot's first id
// (unless --user named ids other than the default 1000:1000, which
// stand: the operator chose that host id), the watcher as its second.
// No account, file or process of the host has them, nor any other live
// box.
//
// The engine starts the box's init, whose pid the supervisor never
// learns: the slot is engine-held (idslot.EngineHeld), kept while this
// supervisor lives and, once it is gone, while the engine still has the
// box (a box still dying within its kill bound, or stalled, keeps its
// ids to itself); a later allocation asks the engine (Exists).
func (e *Engine) takeOwnIDs(ctx context.Context, b *supervisor.Box) error {
	r, err := e.idSlots()
	if err != nil {
		return exitcode.Refused("%w", err)
	}
	r.EngineHas = func(box string) (bool, error) { return e.Exists(ctx, &supervisor.Box{Name: box}) }
	if !r.Holds(b.Name, b.State[idslot.State]) {
		start, err := r.Allocate(b.Name)
		if err != nil {
			return exitcode.Refused("%w", err)
		}
		if err := r.EngineHeld(b.Name, start); err != nil {
			r.Release(b.Name, start)
			return exitcode.Setup("take a host id slot for box %s: %w", b.Name, err)
		}
		b.State[idslot.State] = strconv.FormatInt(start, 10)
	}
	start, _ := strconv.ParseInt(b.State[idslot.State], 10, 64)
	u, g := start, r.GIDStart(start)
	if d := e.daemonIDs; d != nil {
		var ok bool
		if u, g, ok = d.inside(u, g); !ok {
			return exitcode.Setup("host id slot %d of box %s: the rootless daemon's user namespace no longer maps it", start, b.Name)
		}
	}
	ids := &supervisor.OwnIDs{AgentUID: uint32(u), AgentGID: uint32(g), WatcherUID: uint32(u + 1), WatcherGID: uint32(g + 1)}
	if named := b.AgentUID != 0 || b.AgentGID != 0; named && (b.AgentUID != shared.DefaultAgentUID || b.AgentGID != shared.DefaultAgentGID) {
		ids.AgentUID, ids.AgentGID = b.AgentUID, b.AgentGID
	}
	b.OwnIDs = ids
	return nil
}

// dropOwnIDs releases the slot of a box that is gone.
func (e *Engine) dropOwnIDs(b *supervisor.Box) {
	st, ok := b.State[idslot.State]
	if !ok {
		return
	}
	start, err := strconv.ParseInt(st, 10, 64)
	if err != nil {
		return
	}
	r, err := heldSlots(start)
	if err != nil {
		return
	}
	if err := r.Release(b.Name, start); err != nil {
		e.log().Warn("release the box's id slot", "box", b.Name, "err", err)
		return
	}
	delete(b.State, idslot.State)
}
