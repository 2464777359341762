package native

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"deathwatch/supervisor/proc"
)

// The box cgroup is a few folders and files, written here directly: a
// cgroup library (containerd's) brings protobuf stats types whose
// package start-up every native launch would pay, and a larger binary.

// The native runtime's box state keys (supervisor.Box.State), journaled so that a
// later Remove (reconcile) finds the cgroup again.
const (
	StateCgroup        = "cgroup"         // group path, e.g. /deathwatch/dw-abc
	StateCgroupVersion = "cgroup-version" // "1" or "2"
	StateCgroupRoot    = "cgroup-root"    // where the hierarchies are mounted
)

// DefaultCgroupParent is where box cgroups are created, under every
// hierarchy (v1) or under the unified mount (v2).
const DefaultCgroupParent = "/deathwatch"

// cgroupSpec is the plain data of one box's cgroup: worked out by the
// runtime, applied by newBoxCgroup, recorded in supervisor.Box.State.
type cgroupSpec struct {
	Version int    // 1 or 2
	Root    string // /sys/fs/cgroup: v1 holds one folder per controller, v2 is the unified mount
	Group   string // absolute group path below Root (and below each v1 controller)
	Memory  int64  // bytes; 0 = no limit
	Pids    int64  // 0 = no limit
}

// v1Controllers are the only v1 hierarchies a box joins.
var v1Controllers = []string{"memory", "pids", "freezer"}

// A box with a memory limit keeps the watcher out of its agent's memory
// cgroup: what fills that cgroup (the agent's pages, or a tmpfs's, which
// stay charged after their writer dies) makes only an agent process the
// OOM killer's victim, whatever score it gave itself. The box's cgroup
// is held at the limit plus WatcherMemoryReserve, AgentMemoryGroup below
// it at the limit. On v1 the watcher stays in the box's cgroup and forks
// the agent from a thread that joined AgentMemoryGroup (--agent-cgroup-fd).
// On v2 a folder that enables controllers holds no processes: the init
// is born in the box's cgroup, roots its cgroup namespace there and
// moves into AgentMemoryGroup; the supervisor then enables the
// controllers and writes the agent's limits (finishV2) before the spec.
// The watcher forks the agent there, stopped at its exec, moves itself
// into WatcherGroup (--watcher-cgroup-fd), then lets the agent run.
const (
	AgentMemoryGroup     = "agent"
	WatcherGroup         = "watcher"
	WatcherMemoryReserve = 32 << 20
)

// detectCgroup says which cgroup version carries the memory and pids
// controllers on this host and where it is mounted.
func detectCgroup() (version int, root string, err error) {
	if v, _ := proc.CgroupVersion(); v != 0 {
		return v, "/sys/fs/cgroup", nil
	}
	return 0, "", errors.New("no cgroup file system is mounted at /sys/fs/cgroup")
}

// hasController reports whether controller (pids, memory) is there to
// carry a default limit for a box below parent (a v2 tree on a hybrid
// host may have no controllers; a delegated one, only some): on v2,
// what the deepest existing folder of parent may hand down.
func hasController(version int, root, parent, controller string) bool {
	if version == 1 {
		_, err := os.Stat(filepath.Join(root, controller))
		return err == nil
	}
	d := filepath.Join(root, parent)
	for d != root && len(d) > len(root) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		d = filepath.Dir(d)
	}
	b, err := os.ReadFile(filepath.Join(d, "cgroup.controllers"))
	return err == nil && slices.Contains(strings.Fields(string(b)), controller)
}

// boxCgroupSpec works out a box's cgroup from its name and limits.
func boxCgroupSpec(version int, root, parent, name string, memory, pids int64) (cgroupSpec, error) {
	if parent == "" {
		parent = DefaultCgroupParent
	}
	if !path.IsAbs(parent) || path.Clean(parent) != parent {
		return cgroupSpec{}, fmt.Errorf("cgroup parent %q: not a clean absolute path", parent)
	}
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return cgroupSpec{}, fmt.Errorf("box name %q cannot name a cgroup", name)
	}
	if memory < 0 || pids < 0 {
		return cgroupSpec{}, fmt.Errorf("negative limit (memory %d, pids %d)", memory, pids)
	}
	return cgroupSpec{Version: version, Root: root, Group: path.Join(parent, name), Memory: memory, Pids: pids}, nil
}

// state is the spec as supervisor.Box.State entries (limits are not needed to
// find or remove the cgroup).
func (s cgroupSpec) state() map[string]string {
	return map[string]string{
		StateCgroup:        s.Group,
		StateCgroupVersion: strconv.Itoa(s.Version),
		StateCgroupRoot:    s.Root,
	}
}

// cgroupSpecFromState is the inverse of state; ok is false when the
// state records no cgroup.
func cgroupSpecFromState(st map[string]string) (cgroupSpec, bool, error) {
	g := st[StateCgroup]
	if g == "" {
		return cgroupSpec{}, false, nil
	}
	v, err := strconv.Atoi(st[StateCgroupVersion])
	if err != nil || (v != 1 && v != 2) {
		return cgroupSpec{}, false, fmt.Errorf("box state: cgroup version %q is not 1 or 2", st[StateCgroupVersion])
	}
	if !path.IsAbs(g) || path.Clean(g) != g || g == "/" {
		return cgroupSpec{}, false, fmt.Errorf("box state: cgroup path %q is not a clean absolute path", g)
	}
	root := st[StateCgroupRoot]
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	return cgroupSpec{Version: v, Root: root, Group: g}, true, nil
}

// limitFile is one limit of a box cgroup: a file below its folder and
// the value written there.
type limitFile struct{ name, value string }

// limitsV1 are spec's limits on the v1 hierarchies (by controller, and
// "agent" for AgentMemoryGroup). Swap is held at the memory limit so
// that a box cannot page its way past it (when the kernel accounts
// swap).
func (s cgroupSpec) limitsV1(swapAccounting bool) map[string][]limitFile {
	l := map[string][]limitFile{}
	memory := func(bytes int64) []limitFile {
		m := strconv.FormatInt(bytes, 10)
		f := []limitFile{{"memory.limit_in_bytes", m}}
		if swapAccounting {
			f = append(f, limitFile{"memory.memsw.limit_in_bytes", m})
		}
		return f
	}
	if s.Memory > 0 {
		l["memory"] = memory(s.Memory + WatcherMemoryReserve)
		l[AgentMemoryGroup] = memory(s.Memory)
	}
	if s.Pids > 0 {
		l["pids"] = []limitFile{{"pids.max", strconv.FormatInt(s.Pids, 10)}}
	}
	return l
}

// agentTasksV1 is the tasks file of the agent's memory cgroup (v1), which
// exists when the box has a memory limit.
func (s cgroupSpec) agentTasksV1() string {
	return filepath.Join(s.Root, "memory", s.Group, AgentMemoryGroup, "tasks")
}

// limitsV2 are spec's limits on the unified tree (no swap at all): the
// box's folder's, its AgentMemoryGroup's, and the controllers the box's
// folder needs from the folders above it.
func (s cgroupSpec) limitsV2() (box, agent []limitFile, controllers []string) {
	if s.Memory > 0 {
		box = append(box, limitFile{"memory.max", strconv.FormatInt(s.Memory+WatcherMemoryReserve, 10)}, limitFile{"memory.swap.max", "0"})
		agent = append(agent, limitFile{"memory.max", strconv.FormatInt(s.Memory, 10)}, limitFile{"memory.swap.max", "0"})
		controllers = append(controllers, "memory")
	}
	if s.Pids > 0 {
		box = append(box, limitFile{"pids.max", strconv.FormatInt(s.Pids, 10)})
		controllers = append(controllers, "pids")
	}
	return box, agent, controllers
}

// writeLimits writes limit files below dir.
func writeLimits(dir string, files []limitFile) error {
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.value), 0); err != nil {
			return err
		}
	}
	return nil
}

// procsUnder lists the processes of the cgroup folder dir and of every
// folder below it; a folder that is gone holds none.
func procsUnder(dir string) ([]int, error) {
	var out []int
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out, err
}

// killAll sends SIGKILL to pids.
// notSelf refuses to kill a box cgroup that holds a thread of this
// process: v1 lists a process in cgroup.procs while any of its threads
// is in the cgroup, so the freeze would stop the freezing thread itself
// (Kill never thaws: the supervisor hangs) or the kill would end the
// supervisor. A supervisor thread enters a box cgroup only to clone the
// box's init into it (startInCgroupV1); one seen there after that is a
// bug, and the box is left for reconcile rather than taking the
// supervisor with it (seen once in kernel-tests' TestNativeLaunchTimings,
// which creates each box twice).
func notSelf(c boxCgroup) error {
	ps, err := c.Procs()
	if err != nil {
		return fmt.Errorf("list cgroup processes: %w", err)
	}
	for _, p := range ps {
		if p == os.Getpid() {
			return fmt.Errorf("a thread of this supervisor (pid %d) is in the box cgroup %s; the box is not frozen or killed with it (supervisor reconcile removes it)", p, strings.Join(c.Paths(), ", "))
		}
	}
	return nil
}

func killAll(pids []int) error {
	for _, p := range pids {
		if err := unix.Kill(p, unix.SIGKILL); err != nil && err != unix.ESRCH {
			return os.NewSyscallError(fmt.Sprintf("kill(%d, SIGKILL)", p), err)
		}
	}
	return nil
}

// boxCgroup is one box's cgroup, on either version. The box's init joins
// it by itself (the init stage: v1 each thread itself; v2 is born in it
// through CLONE_INTO_CGROUP).
type boxCgroup interface {
	// Procs lists the processes in the cgroup and its children.
	Procs() ([]int, error)
	// Kill sends SIGKILL to every process, atomically with respect to
	// forks (v2 cgroup.kill; v1 freeze, kill, thaw).
	Kill() error
	// Delete removes the (empty) cgroup folders.
	Delete() error
	// Paths are the folders, for messages and tests.
	Paths() []string
}

// newBoxCgroup creates the cgroup with its limits. A cgroup that cannot
// be created because the hierarchy is not writable is refused with one
// line that says so.
func newBoxCgroup(s cgroupSpec) (boxCgroup, error) {
	if err := checkCgroupWritable(s); err != nil {
		return nil, err
	}
	switch s.Version {
	case 1:
		return newBoxCgroupV1(s)
	case 2:
		return newBoxCgroupV2(s)
	}
	return nil, fmt.Errorf("cgroup version %d is not supported", s.Version)
}

// loadBoxCgroup opens an existing box cgroup; it returns nil, nil when
// nothing of it exists any more.
func loadBoxCgroup(s cgroupSpec) (boxCgroup, error) {
	switch s.Version {
	case 1:
		c := &boxCgroupV1{spec: s}
		if len(c.existing()) == 0 {
			return nil, nil
		}
		return c, nil
	case 2:
		c := &boxCgroupV2{spec: s}
		if _, err := os.Stat(c.dir()); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return c, nil
	}
	return nil, fmt.Errorf("cgroup version %d is not supported", s.Version)
}

// checkCgroupWritable refuses early, in one line, when the place the
// box cgroup goes is not writable (an unprivileged supervisor without a
// delegated cgroup).
func checkCgroupWritable(s cgroupSpec) error {
	var dirs []string
	if s.Version == 1 {
		for _, n := range v1Controllers {
			dirs = append(dirs, filepath.Join(s.Root, string(n)))
		}
	} else {
		dirs = []string{s.Root}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			return fmt.Errorf("cgroup v%d controller folder %s is missing: %w", s.Version, d, err)
		}
		// The deepest existing ancestor of the box's folder must be writable.
		p := filepath.Join(d, s.Group)
		for {
			if _, err := os.Stat(p); err == nil {
				break
			}
			if p == d {
				break
			}
			p = filepath.Dir(p)
		}
		if err := unix.Access(p, unix.W_OK); err != nil {
			return fmt.Errorf("cgroup not writable: cannot create %s below %s (%w); run the supervisor as root or delegate a writable cgroup to it", s.Group, p, err)
		}
	}
	return nil
}

// killAndDelete kills every process in the cgroup, waits up to timeout
// for it to be empty, and removes it. It is the box's cleanup.
func killAndDelete(c boxCgroup, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var procs []int
	for attempt := 0; ; attempt++ {
		var err error
		procs, err = c.Procs()
		if err != nil {
			return fmt.Errorf("list cgroup processes: %w", err)
		}
		if len(procs) == 0 {
			break
		}
		if attempt%50 == 0 {
			if err := c.Kill(); err != nil {
				return fmt.Errorf("kill cgroup %s: %w", strings.Join(c.Paths(), ", "), err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still holds %d processes %v after %s", strings.Join(c.Paths(), ", "), len(procs), procs, timeout)
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.Delete(); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", strings.Join(c.Paths(), ", "), err)
	}
	return nil
}

// boxCgroupV1 is a box cgroup on the v1 hierarchies memory, pids, freezer.
type boxCgroupV1 struct {
	spec cgroupSpec
}

// makeDir makes the cgroup folder d: one mkdir where its parent is
// there (a box's folder, below the parent cgroup), MkdirAll where it is
// not; a folder that is there already is kept.
func makeDir(d string) error {
	err := os.Mkdir(d, 0o755)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return os.MkdirAll(d, 0o755)
	case errors.Is(err, fs.ErrExist):
		if st, serr := os.Stat(d); serr == nil && st.IsDir() {
			return nil
		}
	}
	return err
}

func (c *boxCgroupV1) dir(n string) string {
	return filepath.Join(c.spec.Root, n, c.spec.Group)
}

func (c *boxCgroupV1) existing() []string {
	var out []string
	for _, n := range v1Controllers {
		if _, err := os.Stat(c.dir(n)); err == nil {
			out = append(out, c.dir(n))
		}
	}
	return out
}

func newBoxCgroupV1(s cgroupSpec) (*boxCgroupV1, error) {
	c := &boxCgroupV1{spec: s}
	_, err := os.Stat(filepath.Join(s.Root, "memory", "memory.memsw.limit_in_bytes"))
	limits := s.limitsV1(err == nil)
	for _, n := range v1Controllers {
		if err = makeDir(c.dir(n)); err != nil {
			err = cgroupStep("make the "+n+" folder", err)
		} else if err = writeLimits(c.dir(n), limits[n]); err != nil {
			err = cgroupStep("write the "+n+" limits", err)
		}
		if agent := limits[AgentMemoryGroup]; err == nil && n == "memory" && agent != nil {
			dir := filepath.Join(c.dir(n), AgentMemoryGroup)
			if err = makeDir(dir); err != nil {
				err = cgroupStep("make the agent's memory folder", err)
			} else if err = writeLimits(dir, agent); err != nil {
				err = cgroupStep("write the agent's memory limits", err)
			}
		}
		if err != nil {
			// Leave nothing half made.
			for _, d := range c.existing() {
				removeCgroupDir(d)
			}
			return nil, fmt.Errorf("create cgroup v1 %s (memory, pids, freezer): %w", s.Group, err)
		}
	}
	return c, nil
}

func (c *boxCgroupV1) Procs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, n := range v1Controllers {
		ps, err := procsUnder(c.dir(n))
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// Kill freezes the box so that nothing forks between listing and
// killing, sends SIGKILL to every process and thaws it so that the
// kills land.
func (c *boxCgroupV1) Kill() error {
	if err := notSelf(c); err != nil {
		return err
	}
	state := filepath.Join(c.dir("freezer"), "freezer.state")
	frozen := setFreezer(state, "FROZEN", 100*time.Millisecond) == nil
	ps, err := procsUnder(c.dir("freezer"))
	if err == nil {
		err = killAll(ps)
	}
	if err != nil {
		setFreezer(state, "THAWED", time.Second)
		return err
	}
	if err := setFreezer(state, "THAWED", time.Second); err != nil && frozen {
		return fmt.Errorf("thaw %s: %w", state, err)
	}
	return nil
}

// setFreezer writes a freezer state and waits (bounded, unlike
// cgroup1's Freeze) until the kernel reports it.
func setFreezer(file, want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := os.WriteFile(file, []byte(want), 0); err != nil {
			return err
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("freezer state is %s, not %s, after %s", strings.TrimSpace(string(b)), want, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *boxCgroupV1) Delete() error {
	var errs []error
	for _, n := range v1Controllers {
		if err := removeCgroupDir(c.dir(n), AgentMemoryGroup); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *boxCgroupV1) Paths() []string {
	var out []string
	for _, n := range v1Controllers {
		out = append(out, c.dir(n))
	}
	return out
}

// boxCgroupV2 is a box cgroup on the unified hierarchy.
type boxCgroupV2 struct {
	spec cgroupSpec
}

// newBoxCgroupV2 makes the box's folder and its two children, enables
// the controllers its limits need in every folder above it where they
// are not on yet, and writes the box's limits. Every step that fails is
// named with its cause, and all of them are kept: one refused folder
// makes the ones below it fail too.
func newBoxCgroupV2(s cgroupSpec) (*boxCgroupV2, error) {
	c := &boxCgroupV2{spec: s}
	fail := func(errs ...error) (*boxCgroupV2, error) {
		removeCgroupDir(c.dir())
		return nil, fmt.Errorf("create cgroup v2 %s: %w", c.dir(), errors.Join(errs...))
	}
	for _, d := range []string{c.dir(), filepath.Join(c.dir(), WatcherGroup), filepath.Join(c.dir(), AgentMemoryGroup)} {
		if err := makeDir(d); err != nil {
			return fail(cgroupStep("make the folder", err))
		}
	}
	box, _, controllers := s.limitsV2()
	if errs := enableControllers(s.Root, path.Dir(s.Group), controllers); len(errs) > 0 {
		return fail(errs...)
	}
	if err := writeLimits(c.dir(), box); err != nil {
		return fail(cgroupStep("write the box's limits", err))
	}
	return c, nil
}

// enableControllers turns controllers on for the children of every
// folder from root down to parent (a path below root) where
// cgroup.subtree_control does not list them yet; the errors say which
// folder refused and why.
func enableControllers(root, parent string, controllers []string) []error {
	if len(controllers) == 0 {
		return nil
	}
	var errs []error
	dirs := []string{root}
	for _, c := range strings.Split(strings.Trim(parent, "/"), "/") {
		if c != "" {
			dirs = append(dirs, filepath.Join(dirs[len(dirs)-1], c))
		}
	}
	for _, d := range dirs {
		file := filepath.Join(d, "cgroup.subtree_control")
		on, _ := os.ReadFile(file)
		var want []string
		for _, ctl := range controllers {
			if !slices.Contains(strings.Fields(string(on)), ctl) {
				want = append(want, "+"+ctl)
			}
		}
		if len(want) == 0 {
			continue
		}
		if err := os.WriteFile(file, []byte(strings.Join(want, " ")), 0); err != nil {
			errs = append(errs, cgroupStep("enable "+strings.Join(want, " ")+" in "+file, err))
		}
	}
	return errs
}

// finishV2 enables the memory controller in the box's folder and
// writes its agent's limits, once the box's init has left the folder
// for AgentMemoryGroup (until then the no-internal-process rule
// refuses it) and before the watcher starts the agent.
func (c *boxCgroupV2) finishV2() error {
	_, agent, _ := c.spec.limitsV2()
	if len(agent) == 0 {
		return nil
	}
	file := filepath.Join(c.dir(), "cgroup.subtree_control")
	if err := os.WriteFile(file, []byte("+memory"), 0); err != nil {
		return fmt.Errorf("cgroup v2: %w", cgroupStep("enable +memory in "+file+" for the agent's limit", err))
	}
	if err := writeLimits(filepath.Join(c.dir(), AgentMemoryGroup), agent); err != nil {
		return fmt.Errorf("cgroup v2: %w", cgroupStep("write the agent's limits in "+filepath.Join(c.dir(), AgentMemoryGroup), err))
	}
	return nil
}

// cgroupStep names a failed step of a cgroup's setup and what the
// kernel's answer means there.
func cgroupStep(step string, err error) error {
	var why string
	switch {
	case errors.Is(err, unix.EBUSY):
		why = "the folder holds processes of its own, and cgroup v2 enables controllers for the children only of a folder without any (the no-internal-process rule); pick a parent that holds no process"
	case errors.Is(err, unix.ENOENT):
		why = "the controller is not enabled in the folder above (see the step before) or not listed in its cgroup.controllers"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		why = fmt.Sprintf("uid %d may not write there: the folder is not delegated to this user", os.Geteuid())
	case errors.Is(err, unix.EROFS):
		why = "the cgroup file system is mounted read-only here"
	}
	if why == "" {
		return fmt.Errorf("%s: %w", step, err)
	}
	return fmt.Errorf("%s: %w (%s)", step, err, why)
}

func (c *boxCgroupV2) dir() string { return filepath.Join(c.spec.Root, c.spec.Group) }

func (c *boxCgroupV2) Procs() ([]int, error) { return procsUnder(c.dir()) }

func (c *boxCgroupV2) Kill() error {
	if err := notSelf(c); err != nil {
		return err
	}
	// cgroup.kill (Linux 5.14+) kills the whole subtree at once.
	if os.WriteFile(filepath.Join(c.dir(), "cgroup.kill"), []byte("1"), 0) == nil {
		return nil
	}
	// Before it: freeze, kill, thaw.
	freeze := filepath.Join(c.dir(), "cgroup.freeze")
	os.WriteFile(freeze, []byte("1"), 0)
	defer os.WriteFile(freeze, []byte("0"), 0)
	ps, err := procsUnder(c.dir())
	if err != nil {
		return err
	}
	return killAll(ps)
}

func (c *boxCgroupV2) Delete() error {
	return removeCgroupDir(c.dir(), AgentMemoryGroup, WatcherGroup)
}

func (c *boxCgroupV2) Paths() []string { return []string{c.dir()} }

// removeCgroupDir removes one cgroup folder and any (empty) children,
// deepest first; a folder that is already gone is fine. rmdir of a
// cgroup that just emptied can report EBUSY for a moment. The children
// named in known (the box's own folders) go first, each at its first
// rmdir when empty; then the folder, whose other children are listed
// only when its rmdir is refused.
func removeCgroupDir(dir string, known ...string) error {
	for _, k := range known {
		if err := unix.Rmdir(filepath.Join(dir, k)); err != nil && err != unix.ENOENT {
			break // listed and removed below, or refused there
		}
	}
	if err := unix.Rmdir(dir); err == nil || err == unix.ENOENT {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupDir(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	var last error
	for i := 0; i < 200; i++ {
		err := unix.Rmdir(dir)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.EBUSY && err != unix.EAGAIN {
			return os.NewSyscallError("rmdir "+dir, err)
		}
		last = err
		time.Sleep(time.Millisecond)
	}
	return os.NewSyscallError("rmdir "+dir, last)
}
