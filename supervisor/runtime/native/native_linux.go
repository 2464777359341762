package native

import (
	"context"
	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/idslot"
	"deathwatch/supervisor/internal/defaultbounds"
	"deathwatch/supervisor/internal/netpolicy"
	"deathwatch/supervisor/journal"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// State keys of a started native box (besides the cgroup's).
const (
	StateInitPID   = "init-pid"   // host pid of the box's init (the watcher)
	StateInitStart = "init-start" // its start time (clock ticks since boot), against pid reuse
)

// Options configure the native runtime.
type Options struct {
	// CgroupParent is where box cgroups go; "" lets the runtime choose
	// (cgroupParent).
	CgroupParent string
	// CgroupVersion and CgroupRoot override what detectCgroup finds
	// (e.g. 2 and /sys/fs/cgroup/unified on a hybrid host).
	CgroupVersion int
	CgroupRoot    string
	// Self is the supervisor binary whose placeholder (NsinitArg) holds
	// the user namespaces of idmapped mounts (default /proc/self/exe).
	Self string
	// Stderr receives the box init's and the watcher's own logs
	// (default os.Stderr).
	Stderr io.Writer
	// StateDir holds one small record per box for List (default
	// /run/deathwatch/native as root, else below $XDG_RUNTIME_DIR or
	// the temp folder).
	StateDir string
	// SetupTimeout bounds the box setup before the watcher runs
	// (default 30s).
	SetupTimeout time.Duration
	// IDRangeDir holds the lock files of the host id slots the
	// supervisor gives its boxes (default DefaultIDRangeDir as root,
	// else RootlessIDSlotDir of StateDir).
	IDRangeDir string
}

// DefaultPidsLimit is a box's pids limit when none is asked for and the
// box has a cgroup (as root, or with a delegated one): a fork bomb stops
// there, far above what a build or a test suite starts. The memory
// bound is supervisor.DefaultMemory, on the same terms.
const DefaultPidsLimit = supervisor.DefaultPidsLimit

// Native makes boxes from Linux namespaces and a cgroup, the way
// bubblewrap does, with no daemon: the watcher binary builds the box's
// file system (its init stage) and goes on as PID 1 with the control
// stream on an inherited socketpair.
type Native struct {
	log  *slog.Logger
	opts Options
	ids  *idslot.Ranges // a root supervisor's slots (see ranges)

	pendingMu sync.Mutex
	pending   map[string]*pendingPrep // by box name: Create's prep for Start
	// reaped names the boxes whose init (PID 1 of the box's PID
	// namespace) Start's Wait reaped: the kernel ended every other
	// process of the namespace before it let PID 1 be reaped.
	reaped map[string]bool

	parentOnce sync.Once
	parent     string // cgroupParent's answer
	parentErr  error

	kernelOnce sync.Once
	kernelSeen kernelCheck // kernel's answer
}

// New returns the native runtime.
func New(log *slog.Logger, opts Options) *Native {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Self == "" {
		opts.Self = "/proc/self/exe"
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.StateDir == "" {
		opts.StateDir = defaultNativeStateDir()
	}
	if opts.SetupTimeout == 0 {
		opts.SetupTimeout = 30 * time.Second
	}
	if opts.IDRangeDir == "" {
		if os.Geteuid() == 0 {
			opts.IDRangeDir = DefaultIDRangeDir
		} else {
			opts.IDRangeDir = RootlessIDSlotDir(opts.StateDir)
		}
	}
	return &Native{log: log, opts: opts, ids: idslot.Root(opts.IDRangeDir, "/etc"), pending: map[string]*pendingPrep{}, reaped: map[string]bool{}}
}

// RootlessIDSlotDir is where an unprivileged supervisor whose native
// state is in stateDir keeps its boxes' id slot locks ("" when there is
// no state folder).
func RootlessIDSlotDir(stateDir string) string {
	if stateDir == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(stateDir), "idslots")
}

// ranges are the id slots this supervisor's boxes take: as root, the
// block at IDRangeBase; unprivileged, two-id slots of the user's
// subordinate ranges (read now: /etc/subuid may have changed).
func (n *Native) ranges() (*idslot.Ranges, error) {
	if os.Geteuid() == 0 {
		return n.ids, nil
	}
	r, err := idslot.User(n.opts.IDRangeDir, os.Geteuid())
	if err != nil {
		return nil, err
	}
	if n.opts.IDRangeDir == "" {
		return nil, errNoStateDir
	}
	return r, nil
}

var _ supervisor.Runtime = (*Native)(nil)

// EnvCgroupParent names a cgroup (below every v1 controller, or in the
// v2 tree) where the native runtime creates box cgroups: a folder
// delegated to an unprivileged supervisor gives its boxes limits too.
const EnvCgroupParent = "DEATHWATCH_CGROUP_PARENT"

// The native runtime's descriptor. No daemon stands behind it: --runtime
// auto takes it after a rootless engine. Its bounds are several times
// what prove-deathwatch sees on a small, busy host.
func init() {
	// The copy of the program idmapUserns starts ends here, before the
	// program's main runs, whether or not main calls supervisor.Init: a
	// Go controller's main never runs twice.
	if nsinitCopy(os.Args, os.Environ()) {
		os.Exit(NsinitMain())
	}
	supervisor.Register(supervisor.Descriptor{
		Name:     "native",
		AutoRank: 30,
		Bounds:   supervisor.Bounds{Dead: 250 * time.Millisecond, Removed: time.Second},
		Caps: supervisor.CapUnlistedRemains | supervisor.CapHostWatcherOnly | supervisor.CapImageOptional |
			supervisor.CapIf(volatileStateDir(defaultNativeStateDir(), os.Getenv("XDG_RUNTIME_DIR")), supervisor.CapVolatile),
		New: func(cfg supervisor.RuntimeConfig) (supervisor.Runtime, error) {
			return New(cfg.Log, Options{Stderr: cfg.Stderr, CgroupParent: os.Getenv(EnvCgroupParent)}), nil
		},
		InitArg:  NsinitArg,
		InitMain: NsinitMain,
	})
}

// defaultNativeStateDir is /run/deathwatch/native as root, else below
// $XDG_RUNTIME_DIR or the user's state folder; never a shared /tmp
// folder another user could have made first ("" when there is none:
// records are then not kept and List says why).
func defaultNativeStateDir() string {
	if os.Geteuid() == 0 {
		return "/run/deathwatch/native"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "deathwatch", "native")
	}
	if d := journal.DefaultDir(); d != "" {
		return filepath.Join(d, "native")
	}
	return ""
}

// volatileStateDir reports whether the records and id slots kept in
// dir are gone after a reboot, as everything else of a native box is:
// /run and $XDG_RUNTIME_DIR are cleared at boot. An unprivileged
// supervisor without XDG_RUNTIME_DIR keeps them in its state folder,
// which stays: a record there whose journal intent a power loss undid
// would be blocked by reconcile, so its intent stays durable.
func volatileStateDir(dir, xdgRuntime string) bool {
	return dir == "" || under(dir, "/run") || (filepath.IsAbs(xdgRuntime) && under(dir, xdgRuntime))
}

func (n *Native) Name() string { return "native" }

// Probe reports whether this kernel and user can make native boxes.
func (n *Native) Probe(ctx context.Context) (supervisor.Info, error) {
	info := supervisor.Info{Runtime: "native", Rootless: os.Geteuid() != 0}
	info.Version = kernelRelease()
	if info.Rootless {
		// Refusals, not absence: the runtime is here, this user may not use it.
		if why := userNamespacesForbidden(); why != "" {
			info.Detail = "no permission for namespaces: " + why
			return info, exitcode.Refused("%s", info.Detail)
		}
		if _, _, err := subIDRange("/etc/subuid"); err != nil {
			info.Detail = err.Error()
			return info, exitcode.Refused("%s", info.Detail)
		}
	}
	if r := n.kernel().refusal(info.Version); r != "" {
		info.Detail = r
		return info, exitcode.Refused("%s", r)
	}
	v, root, err := n.cgroupPlace()
	if err != nil {
		info.Detail = err.Error()
		return info, nil
	}
	parent, err := n.cgroupParent(v, root)
	if err == nil {
		err = checkCgroupWritable(cgroupSpec{Version: v, Root: root, Group: parent})
	}
	if err != nil {
		info.Detail = err.Error() + " (boxes without --memory/--pids-limit still run)"
	}
	info.Present = true
	return info, nil
}

// Walls says what a native box leaves open on this host (doctor).
func (n *Native) Walls() []string {
	w := []string{
		"--network host is refused unless --allow-host-network: the box would share the host's network namespace, whose loopback ports its agent could reach, and its abstract unix sockets (X11, D-Bus, containerd, systemd) on a kernel without Landlock ABI 6",
	}
	w = append(w, n.kernel().Degraded...)
	if os.Geteuid() != 0 {
		if r, err := n.ranges(); err == nil {
			w = append(w, fmt.Sprintf("at most %d boxes of this user at once: each takes %d of %s", r.Count(), RootlessSlotIDs, r.Where()))
		}
	}
	return w
}

// Bounds says what a native box gets by default here (doctor): pids and
// memory need a cgroup of the box's own (as root, or below a delegated
// EnvCgroupParent).
func (n *Native) Bounds() []string {
	v, root, err := n.cgroupPlace()
	var parent string
	if err == nil {
		parent, err = n.cgroupParent(v, root)
	}
	if err == nil {
		err = checkCgroupWritable(cgroupSpec{Version: v, Root: root, Group: parent})
	}
	if err != nil {
		// An unprivileged box's ids are its own: RLIMIT_NPROC bounds its processes.
		return defaultbounds.Describe(os.Geteuid() != 0, false, "no cgroup of the box's own ("+err.Error()+"; delegate one with "+EnvCgroupParent+")")
	}
	return defaultbounds.Describe(hasController(v, root, parent, "pids"), hasController(v, root, parent, "memory"), "the box's cgroup has no such controller")
}

// cgroupParent is where this supervisor's box cgroups go:
// Options.CgroupParent (EnvCgroupParent) when set; for an unprivileged
// supervisor on v2, the delegated cgroup found from its own
// (delegatedParent); else DefaultCgroupParent.
func (n *Native) cgroupParent(version int, root string) (string, error) {
	if n.opts.CgroupParent != "" {
		return n.opts.CgroupParent, nil
	}
	if version != 2 || os.Geteuid() == 0 {
		return DefaultCgroupParent, nil
	}
	n.parentOnce.Do(func() {
		self, err := selfCgroupV2()
		if err == nil {
			n.parent, err = delegatedParent(self, os.Geteuid(), hostCgroupTree{root})
		}
		n.parentErr = err
	})
	return n.parent, n.parentErr
}

// boxLimits are the box's memory and pids limits: those asked for, else
// the defaults where its cgroup has the controller.
func boxLimits(b *supervisor.Box, version int, root, parent string) (memory, pids int64) {
	memory, pids = b.Memory, b.PidsLimit
	if pids == 0 && hasController(version, root, parent, "pids") {
		pids = DefaultPidsLimit
	}
	if memory == 0 && hasController(version, root, parent, "memory") {
		memory = supervisor.DefaultMemory
	}
	return memory, pids
}

// kernel is what this kernel lacks of kernelFeatures (probed once).
func (n *Native) kernel() kernelCheck {
	n.kernelOnce.Do(func() {
		v, root, _ := n.cgroupPlace()
		n.kernelSeen = checkKernel(v == 2, hostKernelProbe(root))
	})
	return n.kernelSeen
}

// cgroupPlace is the cgroup version and mount to use.
func (n *Native) cgroupPlace() (int, string, error) {
	if n.opts.CgroupVersion != 0 {
		root := n.opts.CgroupRoot
		if root == "" {
			root = "/sys/fs/cgroup"
		}
		return n.opts.CgroupVersion, root, nil
	}
	return detectCgroup()
}

// Create checks everything that can be checked before the box exists,
// creates its cgroup with the limits (while the trees its init stage
// mounts are opened beside it, treesAhead), and records the cgroup in
// b.State. Then it starts the box's init stage in the new namespaces
// (prepareAhead), which boots and waits for its settings from Start
// while the caller journals the box as created. The stage has done
// nothing in the box yet; it dies with the supervisor (Pdeathsig) and
// Remove ends it when Start never comes.
func (n *Native) Create(ctx context.Context, b *supervisor.Box) error {
	if b.State == nil {
		b.State = map[string]string{}
	}
	plan, err := n.checkBox(b)
	if err != nil {
		return err
	}
	spec, perr, err := n.planCgroup(b)
	if err != nil {
		return err
	}
	release, err := n.allocateIDs(b)
	if err != nil {
		return err
	}
	idStart, _ := strconv.ParseInt(b.State[StateIDRange], 10, 64)
	trees := n.treesAhead(b, plan, idStart)
	if err := n.makeCgroup(b, spec, perr); err != nil {
		trees.drop()
		release()
		return err
	}
	if err := n.writeRecord(b); err != nil {
		n.log.Warn("cannot record the native box for ls/reconcile", "box", b.Name, "err", err)
	}
	n.prepareAhead(b, &plan, trees)
	return nil
}

// checkBox refuses a box this host or this runtime cannot run as asked,
// before anything exists. It returns the init stage's settings, worked
// out once: checked here, and what prepareAhead starts the stage with.
func (n *Native) checkBox(b *supervisor.Box) (nsinitConfig, error) {
	root, err := nativeRoot(b.Image)
	if err != nil {
		return nsinitConfig{}, err
	}
	if b.WatcherInImage != "" {
		return nsinitConfig{}, exitcode.Refused("the native runtime bind-mounts the host's watcher; --watcher-in-image is for docker and podman")
	}
	if r := n.kernel().refusal(kernelRelease()); r != "" {
		return nsinitConfig{}, exitcode.Refused("%s", r)
	}
	if err := checkExecutable(b.WatcherPath); err != nil {
		return nsinitConfig{}, exitcode.Setup("watcher %s: %w; build it (make) or pass its path", b.WatcherPath, err)
	}
	plan, err := nsinitPlan(b, root, b.WatcherPath, os.Geteuid() != 0)
	if err != nil {
		return nsinitConfig{}, exitcode.With(exitcode.Of(err, shared.ExitUsage), fmt.Errorf("native box: %w", err))
	}
	if b.Network == "host" && !b.AllowHostNetwork {
		return nsinitConfig{}, exitcode.Refused("%s", netpolicy.HostRefusal)
	}
	if uid, gid := agentIDs(b); os.Geteuid() == 0 && (uid >= IDRangeSize || gid >= IDRangeSize) {
		return nsinitConfig{}, exitcode.Usage("--user %d:%d: a native box maps ids 0-%d only; pick a uid and gid below %d", uid, gid, IDRangeSize-1, IDRangeSize)
	}
	if err := checkWorkdir(b, root); err != nil {
		return nsinitConfig{}, err
	}
	if err := checkMountTargets(b, root); err != nil {
		return nsinitConfig{}, err
	}
	if err := checkMountSources(b, os.Geteuid() == 0); err != nil {
		return nsinitConfig{}, err
	}
	if os.Geteuid() != 0 {
		if err := checkUnprivileged(b); err != nil {
			return nsinitConfig{}, err
		}
	}
	return plan, nil
}

// checkUnprivileged refuses what an unprivileged supervisor's box
// cannot have: idmapped mounts, or namespaces and subordinate ids the
// host does not grant.
func checkUnprivileged(b *supervisor.Box) error {
	if b.MountOwner != nil {
		return exitcode.Usage("--mount-owner is for a native box of a root supervisor (idmapped mounts); an unprivileged box maps no host account, and its agent writes to a --mount only where the host lets others write")
	}
	if why := userNamespacesForbidden(); why != "" {
		return exitcode.Refused("no permission for namespaces: %s", why)
	}
	if _, _, err := subIDRange("/etc/subuid"); err != nil {
		return exitcode.Refused("%w", err)
	}
	if _, _, err := subIDRange("/etc/subgid"); err != nil {
		return exitcode.Refused("%w", err)
	}
	return nil
}

// planCgroup works out the box's cgroup and limits. perr says why there
// is no parent to make it in (an unprivileged supervisor without a
// delegated cgroup): makeCgroup refuses that as an unwritable parent.
func (n *Native) planCgroup(b *supervisor.Box) (spec cgroupSpec, perr, err error) {
	v, cgRoot, err := n.cgroupPlace()
	if err != nil {
		return cgroupSpec{}, nil, exitcode.Setup("%w", err)
	}
	parent, perr := n.cgroupParent(v, cgRoot)
	spec = cgroupSpec{Version: v, Root: cgRoot}
	if perr == nil {
		mem, pids := boxLimits(b, v, cgRoot, parent)
		if spec, err = boxCgroupSpec(v, cgRoot, parent, b.Name, mem, pids); err != nil {
			return cgroupSpec{}, nil, exitcode.Usage("%w", err)
		}
	}
	return spec, perr, nil
}

// allocateIDs takes the box's host ids (kept in b.State, so a box
// created again keeps its own): no account, file or process of the
// host, and no other live box, has these ids. release gives them back.
func (n *Native) allocateIDs(b *supervisor.Box) (release func(), err error) {
	ids, err := n.ranges()
	if err != nil {
		return nil, exitcode.Refused("%w", err)
	}
	if !ids.Holds(b.Name, b.State[StateIDRange]) {
		start, err := ids.Allocate(b.Name)
		if err != nil {
			return nil, exitcode.Refused("%w", err)
		}
		b.State[StateIDRange] = strconv.FormatInt(start, 10)
	}
	return func() {
		if st, err := strconv.ParseInt(b.State[StateIDRange], 10, 64); err == nil {
			ids.Release(b.Name, st)
			delete(b.State, StateIDRange)
		}
	}, nil
}

// makeCgroup creates the box's cgroup and records it in b.State. Without
// a writable parent a box that asks for no limits, of an unprivileged
// supervisor, runs without a cgroup of its own; any other is refused.
func (n *Native) makeCgroup(b *supervisor.Box, spec cgroupSpec, perr error) error {
	werr := perr
	if werr == nil {
		werr = checkCgroupWritable(spec)
	}
	if werr == nil && spec.Version == 2 {
		werr = checkCloneIntoSelf(spec)
	}
	if werr != nil {
		if b.Memory > 0 || b.PidsLimit > 0 || os.Geteuid() == 0 {
			return exitcode.Refused("%w", werr)
		}
		n.log.Info("native box runs without a cgroup of its own (no limits were asked; its PID namespace is the kill domain)", "box", b.Name, "why", werr)
		return nil
	}
	if _, err := newBoxCgroup(spec); err != nil {
		return exitcode.Setup("%w", err)
	}
	for k, v := range spec.state() {
		b.State[k] = v
	}
	return nil
}

// userNamespacesForbidden says why this kernel refuses unprivileged
// user namespaces, or "" when it allows them.
func userNamespacesForbidden() string {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	if read("/proc/sys/kernel/unprivileged_userns_clone") == "0" {
		return "this kernel forbids unprivileged user namespaces (kernel.unprivileged_userns_clone = 0); run as root or set it to 1"
	}
	if read("/proc/sys/user/max_user_namespaces") == "0" {
		return "this kernel forbids user namespaces (user.max_user_namespaces = 0); run as root or raise it"
	}
	if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" {
		return "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1); run as root or allow them for the supervisor"
	}
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return "this kernel has no user namespaces"
	}
	return ""
}

// subIDRange finds the calling user's subordinate id range in an
// /etc/subuid-style file.
func subIDRange(file string) (start, count int, err error) {
	return idslot.SubIDRange(file, os.Geteuid())
}
