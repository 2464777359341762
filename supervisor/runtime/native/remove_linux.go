package native

import (
	"context"
	"deathwatch/supervisor"
	"deathwatch/supervisor/proc"
	"deathwatch/supervisor/trusted"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"deathwatch/shared"
)

// Remove kills whatever is left of the box and removes its cgroup and
// record. It works from b.State alone (a journal entry), and a box that
// is already gone is not an error.
func (n *Native) Remove(ctx context.Context, b *supervisor.Box) error {
	if pp := n.takePrep(b); pp != nil {
		pp.drop() // Create made it; Start never took it
	}
	var errs []error
	spec, ok, err := cgroupSpecFromState(b.State)
	if err == nil && ok {
		// A journal says which cgroup to empty: only the box's own.
		err = n.checkOwnCgroup(spec, b.Name)
		ok = err == nil
	}
	if err != nil {
		errs = append(errs, err)
	}
	if !ok && err == nil && b.Name != "" {
		// No recorded cgroup: look where Create would have put it.
		if v, root, derr := n.cgroupPlace(); derr == nil {
			if parent, perr := n.cgroupParent(v, root); perr == nil {
				if s, serr := boxCgroupSpec(v, root, parent, b.Name, 0, 0); serr == nil {
					spec, ok = s, true
				}
			}
		}
	}
	// The init process, when it is still the one we started (not once
	// Start reaped it).
	reaped := n.takeReaped(b.Name)
	if !reaped {
		if pid := initAlive(b.State); pid > 0 {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
	if ok {
		cg, err := loadBoxCgroup(spec)
		if err != nil {
			errs = append(errs, err)
		} else if cg != nil && (!reaped || cg.Delete() != nil) {
			// With its init reaped, the box's processes are gone with
			// its PID namespace: its cgroup is removed at once. The
			// kernel refuses to remove one that still holds a process
			// (one the host put there): then it is emptied first.
			if err := killAndDelete(cg, 10*time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	ids, ierr := n.ranges()
	if r := b.State[StateIDRange]; ierr != nil {
		// No slots for this user (no subordinate range): none to free.
	} else if r == "" && len(errs) == 0 && b.Name != "" {
		// A supervisor killed between Create and its journal entry:
		// the slot names the box.
		if err := ids.ReleaseAll(b.Name); err != nil {
			errs = append(errs, fmt.Errorf("release host id ranges of %s: %w", b.Name, err))
		}
	} else if r != "" && len(errs) == 0 {
		// Only once nothing of the box runs: its ids may then go to
		// the next box.
		st, err := strconv.ParseInt(r, 10, 64)
		if err == nil {
			err = ids.Release(b.Name, st)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("release host id range %s: %w", r, err))
		}
	}
	if b.Name != "" && n.opts.StateDir != "" && !strings.ContainsAny(b.Name, "/\x00") {
		if err := os.Remove(n.recordPath(b.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove native box %s: %w", b.Name, errors.Join(errs...))
	}
	return nil
}

// checkOwnCgroup refuses a journaled cgroup that is not the box's own
// folder under this runtime's parent, on a cgroup mount: a planted or
// edited entry must not make Remove empty a host cgroup.
//
// An unprivileged supervisor whose parent is found (delegatedParent)
// also takes a box's folder in another DelegatedParent that is its own:
// one started in another of the user's cgroups made it, and the kernel
// lets this user empty only what it owns.
func (n *Native) checkOwnCgroup(spec cgroupSpec, name string) error {
	parent, err := n.cgroupParent(spec.Version, spec.Root)
	if err != nil && n.opts.CgroupParent == "" && os.Geteuid() != 0 {
		parent = "/" + DelegatedParent // nothing found now: the test below decides
	} else if err != nil {
		return fmt.Errorf("box state: %w", err)
	}
	want, err := boxCgroupSpec(spec.Version, spec.Root, parent, name, 0, 0)
	if err != nil {
		return fmt.Errorf("box state: %w", err)
	}
	if spec.Group != want.Group && !n.ownDelegatedBox(spec, name) {
		return fmt.Errorf("box state: cgroup %s is not the box's own (%s); left alone", spec.Group, want.Group)
	}
	roots := []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}
	if n.opts.CgroupRoot != "" {
		roots = append(roots, n.opts.CgroupRoot)
	}
	for _, r := range roots {
		if spec.Root == r {
			return nil
		}
	}
	return fmt.Errorf("box state: cgroup root %s is not a cgroup mount of this runtime; left alone", spec.Root)
}

// ownDelegatedBox reports whether spec's group is a box folder name in
// a DelegatedParent of a cgroup v2 tree, made by this unprivileged
// supervisor's user (see checkOwnCgroup).
func (n *Native) ownDelegatedBox(spec cgroupSpec, name string) bool {
	if n.opts.CgroupParent != "" || os.Geteuid() == 0 || spec.Version != 2 ||
		path.Base(spec.Group) != name || path.Base(path.Dir(spec.Group)) != DelegatedParent {
		return false
	}
	var st unix.Stat_t
	return unix.Lstat(filepath.Join(spec.Root, spec.Group), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && int(st.Uid) == os.Geteuid()
}

var errNoStateDir = errors.New("no folder for native box records: set XDG_RUNTIME_DIR or HOME (a shared /tmp folder is never used)")

// nativeRecord is what List reads back.
type nativeRecord struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	State  map[string]string `json:"state,omitempty"`
}

func (n *Native) recordPath(name string) string {
	return filepath.Join(n.opts.StateDir, name+".json")
}

func (n *Native) writeRecord(b *supervisor.Box) error {
	if b.Name == "" || strings.ContainsAny(b.Name, "/\x00") {
		return fmt.Errorf("box name %q", b.Name)
	}
	if n.opts.StateDir == "" {
		return errNoStateDir
	}
	if err := trusted.EnsureDir(n.opts.StateDir); err != nil {
		return err
	}
	data, err := json.Marshal(nativeRecord{Name: b.Name, Labels: b.Labels, State: b.State})
	if err != nil {
		return err
	}
	tmp := n.recordPath(b.Name) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return trusted.ReplaceFile(tmp, n.recordPath(b.Name))
}

// List returns the native boxes recorded for instance; a box is
// running while its cgroup (or init process) holds processes.
func (n *Native) List(ctx context.Context, instance string) ([]supervisor.Listed, error) {
	if n.opts.StateDir == "" {
		return nil, errNoStateDir
	}
	entries, err := os.ReadDir(n.opts.StateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list native boxes in %s: %w", n.opts.StateDir, err)
	}
	if err := trusted.CheckDir(n.opts.StateDir); err != nil {
		return nil, fmt.Errorf("native state not trusted: %w", err)
	}
	var out []supervisor.Listed
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := trusted.ReadFile(filepath.Join(n.opts.StateDir, e.Name()), 1<<20)
		if err != nil {
			continue
		}
		var r nativeRecord
		if json.Unmarshal(data, &r) != nil || r.Labels[shared.LabelInstance] != instance {
			continue
		}
		out = append(out, supervisor.Listed{Name: r.Name, Labels: r.Labels, Running: nativeRunning(r.State)})
	}
	return out, nil
}

// Remains names the box's cgroup folders that still exist.
func (n *Native) Remains(b *supervisor.Box) (string, []string) {
	spec, ok, err := cgroupSpecFromState(n.state(b))
	if err != nil || !ok {
		return "cgroup", nil
	}
	cg, err := loadBoxCgroup(spec)
	if err != nil || cg == nil {
		return "cgroup", nil
	}
	return "cgroup", cg.Paths()
}

// Exists reports whether the box's record, cgroup or init process is
// still there.
func (n *Native) Exists(ctx context.Context, b *supervisor.Box) (bool, error) {
	st := n.state(b)
	if _, err := os.Stat(n.recordPath(b.Name)); err == nil {
		return true, nil
	}
	if spec, ok, err := cgroupSpecFromState(st); err == nil && ok {
		if cg, err := loadBoxCgroup(spec); err == nil && cg != nil {
			return true, nil
		}
	}
	return initAlive(st) > 0, nil
}

// HostPID is the pid of the box's init (the watcher) while it is the
// process the runtime started.
func (n *Native) HostPID(ctx context.Context, b *supervisor.Box) (int, error) {
	return initAlive(n.state(b)), nil
}

// state is b.State, or what the box's record holds when b carries none.
func (n *Native) state(b *supervisor.Box) map[string]string {
	if len(b.State) > 0 {
		return b.State
	}
	if n.opts.StateDir == "" || trusted.CheckDir(n.opts.StateDir) != nil {
		return nil
	}
	data, err := trusted.ReadFile(n.recordPath(b.Name), 1<<20)
	if err != nil {
		return nil
	}
	var r nativeRecord
	if json.Unmarshal(data, &r) != nil {
		return nil
	}
	return r.State
}

// initAlive is the journaled init pid when that process (pid and start
// time) still runs, else 0.
func initAlive(st map[string]string) int {
	if pid, _ := strconv.Atoi(st[StateInitPID]); pid > 0 {
		if want, err := strconv.ParseUint(st[StateInitStart], 10, 64); err == nil {
			if got, err := proc.StartTime(pid); err == nil && got == want {
				return pid
			}
		}
	}
	return 0
}

func nativeRunning(st map[string]string) bool {
	if spec, ok, err := cgroupSpecFromState(st); err == nil && ok {
		if cg, err := loadBoxCgroup(spec); err == nil && cg != nil {
			if ps, err := cg.Procs(); err == nil && len(ps) > 0 {
				return true
			}
		}
	}
	return initAlive(st) > 0
}

// setReaped records that Start's Wait reaped b's init.
func (n *Native) setReaped(name string) {
	n.pendingMu.Lock()
	defer n.pendingMu.Unlock()
	n.reaped[name] = true
}

// takeReaped reports, once, whether Start's Wait reaped the init of the
// box name.
func (n *Native) takeReaped(name string) bool {
	n.pendingMu.Lock()
	defer n.pendingMu.Unlock()
	r := n.reaped[name]
	delete(n.reaped, name)
	return r
}
