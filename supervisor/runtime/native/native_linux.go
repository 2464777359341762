package native

import (
	"context"
	"deathwatch/supervisor"
	"deathwatch/supervisor/idslot"
	"deathwatch/supervisor/journal"
	"deathwatch/supervisor/proc"
	"deathwatch/supervisor/trusted"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"deathwatch/shared"
	"deathwatch/shared/boxinit"
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
	return &Native{log: log, opts: opts, ids: idslot.Root(opts.IDRangeDir, "/etc"), pending: map[string]*pendingPrep{}}
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
			return info, supervisor.RefusedError("%s", info.Detail)
		}
		if _, _, err := subIDRange("/etc/subuid"); err != nil {
			info.Detail = err.Error()
			return info, supervisor.RefusedError("%s", info.Detail)
		}
	}
	if r := n.kernel().refusal(info.Version); r != "" {
		info.Detail = r
		return info, supervisor.RefusedError("%s", r)
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
		return supervisor.DefaultBounds(os.Geteuid() != 0, false, "no cgroup of the box's own ("+err.Error()+"; delegate one with "+EnvCgroupParent+")")
	}
	return supervisor.DefaultBounds(hasController(v, root, parent, "pids"), hasController(v, root, parent, "memory"), "the box's cgroup has no such controller")
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
// creates its cgroup with the limits, and records the cgroup in
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
	if err := n.makeCgroup(b, spec, perr); err != nil {
		release()
		return err
	}
	if err := n.writeRecord(b); err != nil {
		n.log.Warn("cannot record the native box for ls/reconcile", "box", b.Name, "err", err)
	}
	n.prepareAhead(b, &plan)
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
		return nsinitConfig{}, supervisor.RefusedError("the native runtime bind-mounts the host's watcher; --watcher-in-image is for docker and podman")
	}
	if r := n.kernel().refusal(kernelRelease()); r != "" {
		return nsinitConfig{}, supervisor.RefusedError("%s", r)
	}
	if err := checkExecutable(b.WatcherPath); err != nil {
		return nsinitConfig{}, supervisor.SetupError("watcher %s: %w; build it (make) or pass its path", b.WatcherPath, err)
	}
	plan, err := nsinitPlan(b, root, b.WatcherPath, os.Geteuid() != 0)
	if err != nil {
		return nsinitConfig{}, supervisor.UsageError("native box: %w", err)
	}
	if b.Network == "host" && !b.AllowHostNetwork {
		return nsinitConfig{}, supervisor.RefusedError("%s", supervisor.HostNetworkRefusal)
	}
	if uid, gid := agentIDs(b); os.Geteuid() == 0 && (uid >= IDRangeSize || gid >= IDRangeSize) {
		return nsinitConfig{}, supervisor.UsageError("--user %d:%d: a native box maps ids 0-%d only; pick a uid and gid below %d", uid, gid, IDRangeSize-1, IDRangeSize)
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
		return supervisor.UsageError("--mount-owner is for a native box of a root supervisor (idmapped mounts); an unprivileged box maps no host account, and its agent writes to a --mount only where the host lets others write")
	}
	if why := userNamespacesForbidden(); why != "" {
		return supervisor.RefusedError("no permission for namespaces: %s", why)
	}
	if _, _, err := subIDRange("/etc/subuid"); err != nil {
		return supervisor.RefusedError("%w", err)
	}
	if _, _, err := subIDRange("/etc/subgid"); err != nil {
		return supervisor.RefusedError("%w", err)
	}
	return nil
}

// planCgroup works out the box's cgroup and limits. perr says why there
// is no parent to make it in (an unprivileged supervisor without a
// delegated cgroup): makeCgroup refuses that as an unwritable parent.
func (n *Native) planCgroup(b *supervisor.Box) (spec cgroupSpec, perr, err error) {
	v, cgRoot, err := n.cgroupPlace()
	if err != nil {
		return cgroupSpec{}, nil, supervisor.SetupError("%w", err)
	}
	parent, perr := n.cgroupParent(v, cgRoot)
	spec = cgroupSpec{Version: v, Root: cgRoot}
	if perr == nil {
		mem, pids := boxLimits(b, v, cgRoot, parent)
		if spec, err = boxCgroupSpec(v, cgRoot, parent, b.Name, mem, pids); err != nil {
			return cgroupSpec{}, nil, supervisor.UsageError("%w", err)
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
		return nil, supervisor.RefusedError("%w", err)
	}
	if !ids.Holds(b.Name, b.State[StateIDRange]) {
		start, err := ids.Allocate(b.Name)
		if err != nil {
			return nil, supervisor.RefusedError("%w", err)
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
			return supervisor.RefusedError("%w", werr)
		}
		n.log.Info("native box runs without a cgroup of its own (no limits were asked; its PID namespace is the kill domain)", "box", b.Name, "why", werr)
		return nil
	}
	if _, err := newBoxCgroup(spec); err != nil {
		return supervisor.SetupError("%w", err)
	}
	for k, v := range spec.state() {
		b.State[k] = v
	}
	return nil
}

// CheckImage checks a --image rootfs tree before anything is created
// (none: the host's root).
func (n *Native) CheckImage(_ context.Context, image string) error {
	_, err := nativeRoot(image)
	return err
}

// nativeRoot is the host folder that becomes the box's root: the host's
// own root, or a --rootfs tree that must look like an unpacked image.
func nativeRoot(image string) (string, error) {
	if image == "" {
		return "/", nil
	}
	dir, err := filepath.Abs(image)
	if err != nil {
		return "", supervisor.UsageError("bad rootfs %s: %w", image, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return "", supervisor.ImageError("bad rootfs %s: %w", image, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return "", supervisor.ImageError("bad rootfs %s: not a folder (pass an unpacked image tree)", image)
	}
	for _, d := range []string{"proc", "dev", "tmp"} {
		// Lstat: a symlink would point the box's own mounts elsewhere.
		if st, err := os.Lstat(filepath.Join(dir, d)); err != nil || !st.IsDir() {
			return "", supervisor.ImageError("bad rootfs %s: no /%s folder (an unpacked image has /proc, /dev and /tmp to mount on, as folders)", image, d)
		}
	}
	return dir, nil
}

// checkWorkdir refuses a workdir the agent could not enter: one that
// is neither /tmp, a mount (or below one), nor present in the root
// (below /tmp is a fresh, empty tmpfs; the minimal root shows only
// what minimalRootDirs and minimalEtc name), or one a folder on the way
// closes to others (the agent owns nothing of the root).
func checkWorkdir(b *supervisor.Box, root string) error {
	w := b.Workdir
	if w == "" || w == "/" || w == "/tmp" {
		return nil
	}
	for _, m := range b.Mounts {
		if w == m.Target || strings.HasPrefix(w, m.Target+"/") {
			return nil
		}
	}
	if under(w, "/tmp") {
		return supervisor.UsageError("workdir %s is below the box's fresh /tmp, where nothing exists yet; mount it (--mount SRC:%s) or use /tmp", w, w)
	}
	if root == "/" {
		if _, ok := inMinimalRoot(w); !ok {
			return supervisor.UsageError("workdir %s is not in the box's minimal root (it shows the host's /usr, /bin, /sbin, /lib* and a filtered /etc, nothing of /home, /root, /run, /srv, ...); mount it (--mount SRC:%s) or use /tmp", w, w)
		}
	}
	if st, err := os.Stat(filepath.Join(root, w)); err != nil || !st.IsDir() {
		return supervisor.UsageError("workdir %s does not exist in the box's read-only root; mount it (--mount SRC:%s) or pick a folder that exists", w, w)
	}
	p := root
	for _, c := range strings.Split(strings.TrimPrefix(w, "/"), "/") {
		p = filepath.Join(p, c)
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o001 == 0 {
			return supervisor.UsageError("workdir %s: %s (mode %#o) is closed to others, and in the box the agent owns nothing of the root; mount a folder there (--mount SRC:%s) or pick another", w, strings.TrimPrefix(p, strings.TrimSuffix(root, "/")), st.Mode().Perm(), w)
		}
	}
	return nil
}

// symlinkOnWay walks rel below base and returns the first symlink met
// (its path below base and its text), or "" when there is none before
// the walk ends or leaves what exists.
func symlinkOnWay(base, rel string) (string, string) {
	p := base
	for _, c := range strings.Split(strings.Trim(rel, "/"), "/") {
		if c == "" {
			continue
		}
		p = filepath.Join(p, c)
		st, err := os.Lstat(p)
		if err != nil {
			return "", ""
		}
		if st.Mode()&os.ModeSymlink != 0 {
			dest, _ := os.Readlink(p)
			return "/" + strings.TrimPrefix(strings.TrimPrefix(p, base), "/"), dest
		}
	}
	return "", ""
}

// checkMountTargets refuses a mount whose target the init stage could
// not create, or that passes through a symlink, looking where the box
// will see it: in the mount that covers it (its source on the host), in
// the rootfs, or in what the minimal root shows of the host. Below the
// box's own /tmp nothing exists yet, and the minimal root's own folders
// are made as needed.
func checkMountTargets(b *supervisor.Box, root string) error {
	for i, m := range b.Mounts {
		// The deepest other mount that covers the target.
		cover := -1
		for j, o := range b.Mounts {
			if j != i && o.Target != m.Target && under(m.Target, o.Target) && (cover < 0 || len(o.Target) > len(b.Mounts[cover].Target)) {
				cover = j
			}
		}
		var base, rel, where string
		switch {
		case cover >= 0:
			o := b.Mounts[cover]
			base, rel, where = o.Source, strings.TrimPrefix(m.Target, o.Target), "the mount at "+o.Target
		case under(m.Target, "/tmp"):
			continue
		case root == "/":
			tree, ok := inMinimalRoot(m.Target)
			if !ok {
				continue // made on the minimal root's own tmpfs
			}
			base, rel, where = "/", m.Target, "the host's "+tree
		default:
			base, rel, where = root, m.Target, "the rootfs"
		}
		if link, dest := symlinkOnWay(base, rel); link != "" {
			shown := link
			if cover >= 0 {
				shown = path.Join(b.Mounts[cover].Target, link)
			}
			return supervisor.UsageError("mount target %s passes through the symlink %s -> %s (in %s); name the real path", m.Target, shown, dest, where)
		}
		if cover >= 0 {
			continue // created in the covering mount when missing
		}
		if _, err := os.Stat(filepath.Join(base, rel)); err != nil {
			return supervisor.UsageError("mount target %s does not exist in the box's read-only root; pick a target that exists there, one below /tmp, or (on the host root) one outside /usr, /bin, /sbin, /lib* and /etc", m.Target)
		}
	}
	return nil
}

// under reports whether p is dir or below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func checkExecutable(p string) error {
	if p == "" || !filepath.IsAbs(p) {
		return fmt.Errorf("not an absolute path")
	}
	st, err := os.Stat(p)
	if err != nil {
		return errors.Unwrap(err)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
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

// idmapArgs is the argv of newuidmap/newgidmap that writes map m for
// the process pid.
func idmapArgs(tool string, pid int, m []idTriple) []string {
	args := []string{tool, strconv.Itoa(pid)}
	for _, t := range m {
		args = append(args, strconv.FormatInt(t.box, 10), strconv.FormatInt(t.host, 10), strconv.FormatInt(t.count, 10))
	}
	return args
}

// nativeCloneFlags are the namespaces of a box.
func nativeCloneFlags(network string, userns bool) uintptr {
	f := uintptr(unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if network != "host" {
		f |= unix.CLONE_NEWNET
	}
	if userns {
		f |= unix.CLONE_NEWUSER
	}
	return f
}

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
func (n *Native) prepareAhead(b *supervisor.Box, plan *nsinitConfig) {
	pp := &pendingPrep{box: b, done: make(chan struct{})}
	n.pendingMu.Lock()
	if old := n.pending[b.Name]; old != nil {
		go old.drop()
	}
	n.pending[b.Name] = pp
	n.pendingMu.Unlock()
	go func() {
		defer close(pp.done)
		pp.l, pp.err = n.prepareAndLaunch(b, plan)
	}()
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
// has: nil works them out) and opens what it inherits. It reads b and
// writes nothing of it.
func (n *Native) prepareStart(b *supervisor.Box, plan *nsinitConfig) (p *startPrep, err error) {
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
		return nil, supervisor.UsageError("native box: %w", err)
	}
	if p.ids, err = n.ranges(); err != nil {
		return nil, supervisor.RefusedError("%w", err)
	}
	p.idStart, err = strconv.ParseInt(b.State[StateIDRange], 10, 64)
	if err != nil || p.ids.SlotOf(p.idStart) < 0 {
		return nil, supervisor.SetupError("the box has no host id range of its own (state %q); create it again", b.State[StateIDRange])
	}
	if err := p.openCgroup(b); err != nil {
		return nil, err
	}
	if !p.rootless {
		agentUID, agentGID := agentIDs(b)
		trees, err := openTrees(&p.cfg, n.opts.Self, boxIDs{base: p.idStart, uid: agentUID, gid: agentGID}, b.MountOwner, nsinitFirstExtra+len(p.extra), func(msg string, args ...any) {
			n.log.Warn(msg, append(args, "box", b.Name)...)
		})
		if err != nil {
			return nil, supervisor.SetupError("%w", err)
		}
		p.extra = append(p.extra, trees...)
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
		return supervisor.SetupError("%w", err)
	}
	if !ok {
		return nil
	}
	if p.cg, err = loadBoxCgroup(spec); err != nil {
		return supervisor.SetupError("%w", err)
	} else if p.cg == nil {
		return supervisor.SetupError("the box's cgroup %s is gone; create the box again", spec.Group)
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
			return supervisor.SetupError("open %s to join the box cgroup: %w", path, err)
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
		return supervisor.SetupError("open the agent's memory cgroup: %w", err)
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
		return supervisor.SetupError("open the box's cgroup: %w", err)
	}
	p.cgSpec = spec
	move := filepath.Join(dir, AgentMemoryGroup, "cgroup.procs")
	f, err := os.OpenFile(move, os.O_WRONLY, 0)
	if err != nil {
		return supervisor.SetupError("open %s for the box's init: %w", move, err)
	}
	p.cfg.CgroupMove, p.cfg.CgroupMoveFD = move, p.inherit(f)
	leave := filepath.Join(dir, WatcherGroup, "cgroup.procs")
	if f, err = os.OpenFile(leave, os.O_WRONLY, 0); err != nil {
		return supervisor.SetupError("open %s for the watcher: %w", leave, err)
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
// (supervisor.HoldLive), so the supervisor's SIGKILL closes it at once,
// where the control socket's end closes only after the supervisor's
// address space is torn down.
func (p *startPrep) openLivePipe() error {
	r, w, err := os.Pipe()
	if err != nil {
		return supervisor.SetupError("make the box's live pipe: %w", err)
	}
	p.watcherArg(fmt.Sprintf("--live-fd=%d", p.inherit(r)))
	p.releaseLive = supervisor.HoldLive(w)
	return nil
}

// Start starts the box's init stage in new namespaces, moves it into the
// box cgroup, writes its uid map (unprivileged), sends it the settings
// and waits until it has exec'd the watcher (or says why it could not).
func (n *Native) Start(ctx context.Context, b *supervisor.Box) (*supervisor.Started, error) {
	// Made and started ahead by Create when it could be, else now.
	var l *launched
	var err error
	if pp := n.takePrep(b); pp != nil {
		<-pp.done
		l, err = pp.l, pp.err
	} else {
		l, err = n.prepareAndLaunch(b, nil)
	}
	if err != nil {
		return nil, err
	}
	cmd, ctl, set, p := l.cmd, l.ctl, l.set, l.p
	root, cg := p.root, p.cg
	pid := cmd.Process.Pid
	fail := func(err error) (*supervisor.Started, error) {
		l.kill()
		return nil, err
	}
	// The init stage has its settings (launch sent them) and builds the
	// box while the supervisor records its init.
	deadline := l.t0.Add(n.opts.SetupTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	set.parent.SetDeadline(deadline)
	if b.State == nil {
		b.State = map[string]string{}
	}
	b.State[StateInitPID] = strconv.Itoa(pid)
	if st, err := proc.StartTime(pid); err == nil {
		b.State[StateInitStart] = strconv.FormatUint(st, 10)
	}
	n.writeRecord(b)
	// The init stage writes one line on failure; it closes the
	// descriptor once the box is built (an unprivileged box's on its
	// exec of the watcher), so EOF with nothing read means the watcher
	// runs.
	msg, err := io.ReadAll(io.LimitReader(set.parent, 4096))
	set.parent.Close()
	if err != nil {
		return fail(supervisor.SetupError("wait for the box's init: %w", err))
	}
	if len(msg) > 0 {
		return fail(supervisor.SetupError("set up native box %s: %s", b.Name, strings.TrimSpace(string(msg))))
	}
	if p.finishCgroup != nil {
		if err := p.finishCgroup(); err != nil {
			return fail(supervisor.SetupError("set up native box %s: %w", b.Name, err))
		}
	}
	n.log.Debug("native box started", "box", b.Name, "pid", pid, "root", root, "network", b.Network,
		"clone", l.tClone, "setup", time.Since(l.t0)-l.tClone)
	var reaped atomic.Bool
	return &supervisor.Started{
		Control: ctl.parent,
		Wait: func() error {
			err := cmd.Wait()
			reaped.Store(true)
			go p.dropLive() // no one reads it any more: off the exit path
			return err
		},
		Kill: func() {
			// The watcher is PID 1 of the box: the kernel ends the whole
			// PID namespace with it, and PID 1 is reaped only once every
			// other process of the namespace is gone. Before that, the
			// cgroup kill covers the rest.
			if reaped.Load() {
				return
			}
			cmd.Process.Signal(syscall.SIGKILL)
			if cg != nil {
				cg.Kill()
			}
		},
	}, nil
}

// launched is a box's init stage, started: it waits for its settings.
type launched struct {
	p        *startPrep
	cmd      *exec.Cmd
	ctl, set sockPair // the parent ends (the children's are closed)
	t0       time.Time
	tClone   time.Duration
}

// kill ends a launched init stage that will not be given its settings.
func (l *launched) kill() {
	l.cmd.Process.Kill()
	l.cmd.Wait()
	l.ctl.parent.Close()
	l.set.parent.Close()
	l.p.dropLive()
}

// prepareAndLaunch makes b's startPrep and starts the init stage in new
// namespaces with it.
func (n *Native) prepareAndLaunch(b *supervisor.Box, plan *nsinitConfig) (*launched, error) {
	p, err := n.prepareStart(b, plan)
	if err != nil {
		return nil, err
	}
	return n.launch(b, p)
}

// launch starts the init stage with p (and closes p's descriptors, which
// the stage inherits). The stage boots and waits for its settings.
func (n *Native) launch(b *supervisor.Box, p *startPrep) (*launched, error) {
	failed := true
	defer func() {
		if failed {
			p.close()
			p.dropLive()
		}
	}()
	ctl, set, devnull, err := openInitEnds()
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	cmd := initCmd(b, p, n.opts.Stderr, ctl.child, set.child, devnull)
	start := cmd.Start
	if len(p.cgTasks) > 0 {
		start = func() error { return startInCgroupV1(p.cgTasks, p.cgRoot, cmd.Start) }
	}
	t0 := time.Now()
	err = start()
	tClone := time.Since(t0)
	ctl.child.Close()
	set.child.Close()
	p.close() // the init stage holds its own copies
	if err != nil {
		ctl.parent.Close()
		set.parent.Close()
		if p.cgDir != nil {
			if cerr := checkCloneIntoSelf(p.cgSpec); cerr != nil {
				return nil, supervisor.RefusedError("start the box's init: %w: %w", cerr, err)
			}
		}
		return nil, namespaceError(err, p.rootless)
	}
	l := &launched{p: p, cmd: cmd, ctl: ctl, set: set, t0: t0, tClone: tClone}
	failed = false
	if err := n.settle(b, l); err != nil {
		l.kill()
		return nil, err
	}
	return l, nil
}

// openInitEnds makes what the init stage is started with besides p's
// descriptors: the control and settings socket pairs, and /dev/null for
// its stdin and stdout.
func openInitEnds() (ctl, set sockPair, devnull *os.File, err error) {
	if ctl, err = socketPair("control"); err != nil {
		return sockPair{}, sockPair{}, nil, supervisor.SetupError("%w", err)
	}
	if set, err = socketPair("settings"); err != nil {
		ctl.close()
		return sockPair{}, sockPair{}, nil, supervisor.SetupError("%w", err)
	}
	if devnull, err = os.Open(os.DevNull); err != nil {
		ctl.close()
		set.close()
		return sockPair{}, sockPair{}, nil, supervisor.SetupError("open %s: %w", os.DevNull, err)
	}
	return ctl, set, devnull, nil
}

// initCmd is the init stage's command: the watcher binary in its init
// mode, cloned into the box's new namespaces with the descriptors 3
// (control), 4 (settings), 5 (kept free) and p's from 6.
func initCmd(b *supervisor.Box, p *startPrep, stderr io.Writer, ctl, set, devnull *os.File) *exec.Cmd {
	cmd := &exec.Cmd{
		Path:       initPath(b, p),
		Args:       append(append([]string(nil), p.cfg.Argv...), boxinit.Arg),
		Env:        p.cfg.Env,
		Stdin:      devnull,
		Stdout:     devnull,
		Stderr:     stderr,
		ExtraFiles: append([]*os.File{ctl, set, nil}, p.extra...), // fds 3, 4, (5), 6...
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: nativeCloneFlags(b.Network, true),
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if !p.rootless {
		// Written by the clone's parent before the init stage execs, and
		// the stage execs as the box's root (host id idStart): it holds
		// every capability in the box's namespaces and none outside.
		m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(p.idStart), Size: IDRangeSize}}
		cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = m, m
		cmd.SysProcAttr.GidMappingsEnableSetgroups = true // the watcher clears the agent's groups
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	}
	if p.cgDir != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(p.cgDir.Fd())
	}
	if len(p.cgTasks) > 0 {
		cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWCGROUP
	}
	return cmd
}

// initPath is the watcher binary the init stage runs, and then PID 1 of
// the box in the same process. As root it runs from the read-only
// detached tree of its bind mount (what the box sees at
// boxWatcherPath), so that the box's PID 1 is never a file of a
// writable host mount.
func initPath(b *supervisor.Box, p *startPrep) string {
	self := b.WatcherPath
	for _, op := range p.cfg.Ops {
		if op.Target == boxWatcherPath && op.TreeFD > 0 {
			self = "/proc/self/fd/" + strconv.Itoa(op.TreeFD) // the child's descriptor, resolved by its execve
		}
	}
	return self
}

// settle finishes a cloned init stage before it runs anything: an
// unprivileged box's id maps and process limit, the id slot's record of
// the init, and the settings.
func (n *Native) settle(b *supervisor.Box, l *launched) error {
	p, pid := l.p, l.cmd.Process.Pid
	if p.rootless {
		if err := mapUnprivileged(b, p, pid); err != nil {
			return err
		}
	}
	// The slot names its init before the init runs anything: a slot is
	// taken back only once both the supervisor and the init are gone.
	if err := p.ids.Started(b.Name, p.idStart, pid); err != nil {
		return supervisor.SetupError("record the box's init in its id slot: %w", err)
	}
	// The settings go at once: the stage builds the box's file system
	// (inside its own namespaces: nothing of it is on the host) while
	// the caller journals the box as created, and Start waits for the
	// outcome. They fit the socket's buffer, so the write does not wait
	// for the stage.
	l.set.parent.SetWriteDeadline(l.t0.Add(n.opts.SetupTimeout))
	if _, err := l.set.parent.Write(boxinit.WriteSettings(p.cfg.Marshal())); err != nil {
		return supervisor.SetupError("send settings to the box's init: %w", err)
	}
	return nil
}

// mapUnprivileged writes an unprivileged box's id maps (newuidmap) and,
// for a box without a cgroup, its process limit.
func mapUnprivileged(b *supervisor.Box, p *startPrep, pid int) error {
	agentUID, agentGID := agentIDs(b)
	uids, gids := rootlessMaps(p.ids, p.idStart, os.Geteuid(), os.Getegid(), agentUID, agentGID)
	if err := writeIDMaps(context.Background(), pid, uids, gids); err != nil {
		return supervisor.SetupError("%w", err)
	}
	if b.State[StateCgroup] == "" {
		// No cgroup, so no pids.max: the agent's and the watcher's
		// host ids are the box's alone, so a process limit per uid
		// (inherited by everything the init starts) is one per box.
		lim := unix.Rlimit{Cur: DefaultPidsLimit, Max: DefaultPidsLimit}
		if err := unix.Prlimit(pid, unix.RLIMIT_NPROC, &lim, nil); err != nil {
			return supervisor.SetupError("limit the box's processes: %w", os.NewSyscallError("prlimit(RLIMIT_NPROC)", err))
		}
	}
	return nil
}

// namespaceError turns a failed clone into one line a person can act on.
func namespaceError(err error, userns bool) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EINVAL) {
		why := "the kernel refused to create the namespaces"
		if userns {
			if w := userNamespacesForbidden(); w != "" {
				why = w
			} else {
				why += " (unprivileged user namespaces may be restricted here)"
			}
		}
		return supervisor.RefusedError("no permission for namespaces: %s: %w", why, errors.Unwrap(err))
	}
	return supervisor.SetupError("start the box's init: %w", err)
}

// writeIDMaps writes the box's uid and gid maps (see
// rootlessMaps) through the setuid helpers.
func writeIDMaps(ctx context.Context, pid int, uids, gids []idTriple) error {
	for _, m := range []struct {
		tool string
		m    []idTriple
	}{{"newuidmap", uids}, {"newgidmap", gids}} {
		tool, err := exec.LookPath(m.tool)
		if err != nil {
			return fmt.Errorf("%s is not installed (package uidmap); an unprivileged supervisor needs it to map the agent's uid", m.tool)
		}
		args := idmapArgs(m.tool, pid, m.m)
		cmd := exec.CommandContext(ctx, tool, args[1:]...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

type sockPair struct{ parent, child *os.File }

func (p sockPair) close() { p.parent.Close(); p.child.Close() }

// socketPair makes a connected pair, both ends close-on-exec; the
// parent's end is non-blocking (for deadlines), the child's blocking.
func socketPair(name string) (sockPair, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return sockPair{}, fmt.Errorf("%s socketpair: %w", name, os.NewSyscallError("socketpair", err))
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return sockPair{}, os.NewSyscallError("set non-blocking", err)
	}
	return sockPair{parent: os.NewFile(uintptr(fds[0]), name), child: os.NewFile(uintptr(fds[1]), name+"-box")}, nil
}

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
	// The init process, when it is still the one we started.
	if pid := initAlive(b.State); pid > 0 {
		unix.Kill(pid, unix.SIGKILL)
	}
	if ok {
		cg, err := loadBoxCgroup(spec)
		if err != nil {
			errs = append(errs, err)
		} else if cg != nil {
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
