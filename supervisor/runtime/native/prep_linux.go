package native

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/idslot"
	"deathwatch/supervisor/livepipe"
)

// startPrep is what the init stage is started with, worked out before
// the clone: its settings, the descriptors it inherits (fds 6...), and
// the box cgroup.
type startPrep struct {
	root     string
	rootless bool
	cfg      nsinitConfig
	ids      *idslot.Ranges
	idStart  int64
	extra    []*os.File
	cg       boxCgroup
	cgDir    *os.File // v2: the child is born in the cgroup (CLONE_INTO_CGROUP)
	cgSpec   cgroupSpec
	// finishCgroup completes a v2 box cgroup once the init has moved
	// into its agent folder (boxCgroupV2.finishV2).
	finishCgroup func() error
	// cgTasks are the box's v1 tasks files, for a root supervisor: its
	// cloning thread joins them (startInCgroupV1).
	cgTasks []*os.File
	cgRoot  string
	// releaseLive closes the live pipe's write end (nil before it is
	// made); the init stage, and then the watcher, hold its read end.
	releaseLive func()
}

// dropLive closes the live pipe's write end: once the watcher is gone,
// or when the box is ended before it ran.
func (p *startPrep) dropLive() {
	if p.releaseLive != nil {
		p.releaseLive()
	}
}

func (p *startPrep) close() {
	for _, f := range p.extra {
		f.Close()
	}
	if p.cgDir != nil {
		p.cgDir.Close()
	}
	for _, f := range p.cgTasks {
		f.Close()
	}
}

// pendingPrep is an init stage being prepared and started while the
// supervisor journals the box as created (see Create).
type pendingPrep struct {
	box  *supervisor.Box
	done chan struct{}
	l    *launched
	err  error
}

// prepareAhead prepares and starts b's init stage beside the caller's
// next step (exec journals the box as created): the stage's
// clone, exec and runtime start (a few ms) overlap it. Start takes it.
// trees are the ones treesAhead is opening (nil: none yet).
func (n *Native) prepareAhead(b *supervisor.Box, plan *nsinitConfig, trees *aheadTrees) {
	pp := &pendingPrep{box: b, done: make(chan struct{})}
	n.pendingMu.Lock()
	if old := n.pending[b.Name]; old != nil {
		go old.drop()
	}
	n.pending[b.Name] = pp
	n.pendingMu.Unlock()
	go func() {
		defer close(pp.done)
		pp.l, pp.err = n.prepareAndLaunch(b, plan, trees)
	}()
}

// aheadTrees are a box's trees (the host sources its init stage
// mounts, as detached trees), opened on a goroutine of their own while
// Create makes the box's cgroup: they name nothing on the host, and
// need only the box's settings and id range.
type aheadTrees struct {
	done  chan struct{}
	cfg   nsinitConfig // the settings, with the trees' descriptors
	files []*os.File
	err   error
}

// treesAhead starts opening the trees of b, whose settings are plan and
// whose id range starts at idStart; nil for an unprivileged supervisor,
// which hands the init stage no trees.
func (n *Native) treesAhead(b *supervisor.Box, plan nsinitConfig, idStart int64) *aheadTrees {
	if os.Geteuid() != 0 {
		return nil
	}
	t := &aheadTrees{done: make(chan struct{}), cfg: plan}
	t.cfg.Ops = slices.Clone(plan.Ops) // openTrees names each op's tree in it
	ids := n.treeIDs(b, idStart)
	go func() {
		defer close(t.done)
		t.files, t.err = n.openTreesFor(b, &t.cfg, ids)
	}()
	return t
}

// take waits for the trees and returns them; the caller owns the files.
func (t *aheadTrees) take() (nsinitConfig, []*os.File, error) {
	<-t.done
	return t.cfg, t.files, t.err
}

// drop waits for the trees and closes them: the box will not start.
func (t *aheadTrees) drop() {
	if t == nil {
		return
	}
	_, files, _ := t.take()
	for _, f := range files {
		f.Close()
	}
}

// treeIDs are the host ids the trees of b, whose id range starts at
// idStart, are idmapped to.
func (n *Native) treeIDs(b *supervisor.Box, idStart int64) boxIDs {
	agentUID, agentGID := agentIDs(b)
	return boxIDs{base: idStart, uid: agentUID, gid: agentGID}
}

// openTreesFor opens the trees cfg names for b, as the init stage's
// first inherited descriptors (from nsinitFirstExtra), and names them
// in cfg.
func (n *Native) openTreesFor(b *supervisor.Box, cfg *nsinitConfig, ids boxIDs) ([]*os.File, error) {
	return openTrees(cfg, n.opts.Self, ids, b.MountOwner, nsinitFirstExtra, func(msg string, args ...any) {
		n.log.Warn(msg, append(args, "box", b.Name)...)
	})
}

// drop waits for the prep and ends the init stage it started.
func (pp *pendingPrep) drop() {
	<-pp.done
	if pp.l != nil {
		pp.l.kill()
	}
}

// takePrep returns the prep made ahead for b, or nil.
func (n *Native) takePrep(b *supervisor.Box) *pendingPrep {
	n.pendingMu.Lock()
	defer n.pendingMu.Unlock()
	pp := n.pending[b.Name]
	delete(n.pending, b.Name)
	if pp != nil && pp.box != b {
		go pp.drop()
		return nil
	}
	return pp
}

// prepareStart works out the init stage's settings (plan, when Create
// has: nil works them out) and opens what it inherits, taking the trees
// treesAhead opened when there are any. It reads b and writes nothing
// of it.
func (n *Native) prepareStart(b *supervisor.Box, plan *nsinitConfig, trees *aheadTrees) (p *startPrep, err error) {
	defer func() { trees.drop() }() // unless taken (then nil)
	root, err := nativeRoot(b.Image)
	if err != nil {
		return nil, err
	}
	// Every box has a user namespace. Unprivileged, the caller's own
	// id and its subordinate range are mapped (newuidmap, after the
	// clone; the init stage re-execs to gain its capabilities). As root,
	// the box's own host range is mapped before the init stage runs.
	p = &startPrep{root: root, rootless: os.Geteuid() != 0}
	opened := p // what a failure below closes (the results are nil then)
	defer func() {
		if err != nil {
			opened.close()
		}
	}()
	if plan != nil {
		p.cfg = *plan // Create's (b has not changed since)
	} else if p.cfg, err = nsinitPlan(b, root, b.WatcherPath, p.rootless); err != nil {
		return nil, exitcode.With(exitcode.Of(err, shared.ExitUsage), fmt.Errorf("native box: %w", err))
	}
	if p.ids, err = n.ranges(); err != nil {
		return nil, exitcode.Refused("%w", err)
	}
	p.idStart, err = strconv.ParseInt(b.State[StateIDRange], 10, 64)
	if err != nil || p.ids.SlotOf(p.idStart) < 0 {
		return nil, exitcode.Setup("the box has no host id range of its own (state %q); create it again", b.State[StateIDRange])
	}
	// The trees first: they are the first inherited descriptors
	// (openTreesFor), the cgroup's files follow.
	if trees != nil {
		cfg, files, err := trees.take()
		if err != nil {
			return nil, exitcode.Setup("%w", err)
		}
		p.cfg, p.extra = cfg, files
		trees = nil
	} else if !p.rootless {
		files, err := n.openTreesFor(b, &p.cfg, n.treeIDs(b, p.idStart))
		if err != nil {
			return nil, exitcode.Setup("%w", err)
		}
		p.extra = files
	}
	if err := p.openCgroup(b); err != nil {
		return nil, err
	}
	// Last: nothing fails after it.
	if err := p.openLivePipe(); err != nil {
		return nil, err
	}
	return p, nil
}

// inherit adds f to the descriptors the init stage inherits and returns
// its number there: 3 control, 4 settings, 5 kept free (stage 2's
// settings pipe), then these (cgroup files and trees) in order.
func (p *startPrep) inherit(f *os.File) int {
	fd := nsinitFirstExtra + len(p.extra)
	p.extra = append(p.extra, f)
	return fd
}

// watcherArg adds a flag to the watcher's argv, copied first: the plan
// may be Create's.
func (p *startPrep) watcherArg(flag string) {
	p.cfg.Argv = append(p.cfg.Argv[:len(p.cfg.Argv):len(p.cfg.Argv)], flag)
}

// openCgroup opens the box cgroup's files the init stage and the
// watcher join it by, when Create made one (b.State names it).
func (p *startPrep) openCgroup(b *supervisor.Box) error {
	spec, ok, err := cgroupSpecFromState(b.State)
	if err != nil {
		return exitcode.Setup("%w", err)
	}
	if !ok {
		return nil
	}
	if p.cg, err = loadBoxCgroup(spec); err != nil {
		return exitcode.Setup("%w", err)
	} else if p.cg == nil {
		return exitcode.Setup("the box's cgroup %s is gone; create the box again", spec.Group)
	}
	switch spec.Version {
	case 1:
		return p.openCgroupV1(spec)
	case 2:
		return p.openCgroupV2(b, spec)
	}
	return nil
}

// openCgroupV1 opens the box's tasks files: a root supervisor's cloning
// thread joins them, an unprivileged box's init stage writes them. They
// are opened here because in its own user namespace the box may not
// open host cgroup files, and a write is checked against the opener's
// credentials.
func (p *startPrep) openCgroupV1(spec cgroupSpec) error {
	for _, n := range v1Controllers {
		path := filepath.Join(spec.Root, string(n), spec.Group, "tasks")
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return exitcode.Setup("open %s to join the box cgroup: %w", path, err)
		}
		if !p.rootless {
			p.cgTasks, p.cgRoot = append(p.cgTasks, f), spec.Root
			continue
		}
		p.cfg.CgroupTasks = append(p.cfg.CgroupTasks, path)
		p.cfg.CgroupTaskFDs = append(p.cfg.CgroupTaskFDs, p.inherit(f))
	}
	p.cfg.CgroupNSDone = !p.rootless
	// The agent's own memory cgroup, when the box has a memory limit:
	// the watcher forks the agent from a thread that joined it.
	if f, err := os.OpenFile(spec.agentTasksV1(), os.O_WRONLY, 0); err == nil {
		p.watcherArg(fmt.Sprintf("--agent-cgroup-fd=%d", p.inherit(f)))
	} else if !errors.Is(err, os.ErrNotExist) {
		return exitcode.Setup("open the agent's memory cgroup: %w", err)
	}
	return nil
}

// openCgroupV2 opens the box's cgroup, which the init stage is born in
// (CLONE_INTO_CGROUP), and the cgroup.procs files of the init's move
// into the agent's folder and of the watcher's, which it leaves the
// agent for (see WatcherGroup): the writes are checked against the
// opener's credentials.
func (p *startPrep) openCgroupV2(b *supervisor.Box, spec cgroupSpec) error {
	dir := filepath.Join(spec.Root, spec.Group)
	var err error
	if p.cgDir, err = os.Open(dir); err != nil {
		return exitcode.Setup("open the box's cgroup: %w", err)
	}
	p.cgSpec = spec
	move := filepath.Join(dir, AgentMemoryGroup, "cgroup.procs")
	f, err := os.OpenFile(move, os.O_WRONLY, 0)
	if err != nil {
		return exitcode.Setup("open %s for the box's init: %w", move, err)
	}
	p.cfg.CgroupMove, p.cfg.CgroupMoveFD = move, p.inherit(f)
	leave := filepath.Join(dir, WatcherGroup, "cgroup.procs")
	if f, err = os.OpenFile(leave, os.O_WRONLY, 0); err != nil {
		return exitcode.Setup("open %s for the watcher: %w", leave, err)
	}
	p.watcherArg(fmt.Sprintf("--watcher-cgroup-fd=%d", p.inherit(f)))
	limited := spec
	limited.Memory, limited.Pids = boxLimits(b, spec.Version, spec.Root, path.Dir(spec.Group))
	p.finishCgroup = (&boxCgroupV2{spec: limited}).finishV2
	return nil
}

// openLivePipe makes the live pipe: a second, earlier alarm beside the
// control stream. The box inherits its read end (watcher --live-fd);
// its write end is held on a thread of the supervisor's own
// (livepipe.Hold), so the supervisor's SIGKILL closes it at once,
// where the control socket's end closes only after the supervisor's
// address space is torn down.
func (p *startPrep) openLivePipe() error {
	r, w, err := os.Pipe()
	if err != nil {
		return exitcode.Setup("make the box's live pipe: %w", err)
	}
	p.watcherArg(fmt.Sprintf("--live-fd=%d", p.inherit(r)))
	p.releaseLive = livepipe.Hold(w)
	return nil
}
