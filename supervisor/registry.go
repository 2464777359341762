package supervisor

// The runtime registry, in the way containerd registers its plugins:
// every runtime package registers one Descriptor per runtime from its
// init, and everything above the runtimes (the CLI's enums, --runtime
// auto, ls, reconcile, doctor, prove-deathwatch, demo) asks the
// registry and the Runtime interface instead of naming a runtime.
//
// # How to add a runtime
//
//  1. Make a package under supervisor/runtime/NAME (fence Linux-only code
//     with _linux.go files or build tags, and keep a doc file that builds
//     everywhere, as supervisor/runtime/native does).
//  2. Implement Runtime (supervisor/runtime.go) on a type; every argv it
//     hands to a CLI comes from a pure builder with a table test.
//     Implement ImageChecker and Admitter when the runtime can check
//     an image, a limit or a mount before anything is created, Preparer when it
//     names its own boxes, journals state from the start or asks for
//     mount-bridge links; attach.Start (supervisor/internal/attach) starts an engine client that
//     carries the stream. What one consumer alone asks is declared
//     there, and the runtime's test file asserts it
//     (var _ hostcheck.WallsReporter = (*T)(nil)): reconcile's
//     NonceReader when its boxes carry no labels and Sweeper when its
//     launches leave objects beside the box; hostcheck's WallsReporter
//     and BoundsReporter (doctor), WatcherVersionCommander (doctor's
//     image check), ProcessCounter (prove-deathwatch, for
//     CapNoHostProcesses) and Remainer (demo).
//  3. In the package's init, call Register with a Descriptor: the name
//     (what --runtime takes), whether a rootful daemon stands behind it,
//     its place in --runtime auto, its default proof bounds, the
//     capabilities it declares (Caps: read the Capability list, the one
//     place that says what the lifecycle does with each), how to tell it
//     is installed, and the factory.
//  4. Add one blank import line to supervisor/cli/runtimes.go.
//
// Nothing else changes: `supervisor exec --runtime NAME`, ls, reconcile,
// doctor and prove-deathwatch pick it up from the registry.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor/exitcode"
)

// RuntimeConfig is what a runtime is constructed with.
type RuntimeConfig struct {
	Log *slog.Logger
	// Stderr receives what the box's init writes to its stderr (the
	// watcher's own log lines, prefixed "watcher: ") while it runs.
	Stderr io.Writer
	// EngineEnv is the environment for engine CLIs; nil means
	// os.Environ(). It never holds the agent's variables.
	EngineEnv []string
	// ProveBind runs a bind proof for a runtime that asks one before
	// it binds a folder of the supervisor's into a box; nil: none can
	// be run, and the runtime binds no such folder.
	ProveBind BindProver
}

// BindProver runs the bind proof (a nonce file in dir, bind-mounted
// read-only into a real box, must read back the same from inside:
// hostcheck's staging probe) and says whether it held.
type BindProver func(ctx context.Context, runtime, dir string) (ok bool, detail string)

// RuntimeFactory makes a runtime.
type RuntimeFactory func(RuntimeConfig) (Runtime, error)

// Bounds are what prove-deathwatch holds a runtime to.
type Bounds struct {
	// Dead: from the trigger (SIGKILL; for heartbeat and deadline, on
	// top of the heartbeat, or of deadline + grace) until every process
	// of the box is dead.
	Dead time.Duration
	// Removed: from the trigger until the box is gone (a runtime with
	// AutoRemove: the runtime's own removal; else: removed by the
	// reconcile that prove runs once the processes are dead).
	Removed time.Duration
}

// Descriptor says what a runtime is, for everything above it.
type Descriptor struct {
	// Name is what --runtime takes, what the journal and events record.
	Name string
	// Daemon: a daemon stands behind the runtime, and its root may be
	// the host's (Info.Rootless tells): a rootful one is refused unless
	// --allow-rootful. Doctor reports it as rootful/rootless; a runtime
	// without a daemon as root/unprivileged.
	Daemon bool
	// AutoRank is the runtime's place in --runtime auto (lower first; 0
	// is never picked by auto). Auto takes the first usable runtime that
	// has no daemon or a rootless one and has the image (ImageChecker),
	// else the first rootful one with the image that --allow-rootful
	// accepts, and says on one line which it chose and why.
	AutoRank int
	// Bounds are the runtime's default prove-deathwatch bounds.
	Bounds Bounds
	// Caps are what the runtime declares it does or needs, beyond the
	// Runtime interface (Capability: each is defined in one place).
	Caps Capability
	// ImageWatcher: the box can run only a watcher baked into its image
	// (a microVM cannot bind-mount the host's); this is the default
	// --watcher-in-image, and a host --watcher is refused.
	ImageWatcher string
	// Installed says why the runtime cannot be used on this host at all
	// (its CLI is not on PATH, another OS), or nil. It is cheap: no
	// engine round trip. env is the engine CLIs' environment.
	Installed func(env []string) error
	// New makes the runtime.
	New RuntimeFactory
	// InitArg and InitMain are a hidden mode of the program that the
	// runtime re-executes (native: the placeholder that holds an
	// idmapped mount's user namespace): when the first argument is
	// InitArg, Init runs InitMain before anything else and exits with
	// its status. Exec refuses such a runtime in a program that did not
	// call Init.
	InitArg  string
	InitMain func() int
}

// Capability is one thing a runtime declares that it does or needs,
// beyond the Runtime interface, in its Descriptor's Caps: everything
// above the runtimes asks Has, never a runtime's name. Every capability
// is defined here.
type Capability uint32

const (
	// CapAutoRemove: the runtime removes a box by itself once its watcher
	// exits (docker/podman --rm), also after a SIGKILL of the
	// supervisor; prove-deathwatch measures that removal. Otherwise
	// reconcile removes what a killed supervisor left.
	CapAutoRemove Capability = 1 << iota
	// CapUnlistedRemains: a box may leave remains that List does not show
	// (native: an empty cgroup; podman: a one-step run's cidfile
	// folder); reconcile then calls Remove for an open
	// journal entry whose box is not listed.
	CapUnlistedRemains
	// CapVolatile: nothing of a box outlives the host's power: its
	// processes, cgroup and namespaced mounts live in memory, and what
	// the runtime keeps on disk (native: its records and id slots) is in
	// /run, which boot clears; native without XDG_RUNTIME_DIR, whose
	// records are in the state folder, is not). After a power loss there is nothing for
	// reconcile to find, and a SIGKILL of the supervisor leaves the
	// journal's writes in the page cache, so the journal syncs none of
	// the box's entry (no fsync on its launch): see Journal.Put.
	CapVolatile
	// CapIntentFinds: the journaled intent alone lets reconcile find and
	// prove a box (the engine lists it by the intent's labels and nonce;
	// nothing a later write records is needed to remove it), so a
	// runtime named outright (not auto) has its intent staged beside its
	// probe and committed once the launch is accepted (a Preparer's is
	// written again after Prepare, which may change the box). See
	// launchjournal.go.
	CapIntentFinds
	// CapHostWatcherOnly: the box always runs the host's watcher, which the
	// runtime itself puts into the box and checks at Create
	// (--watcher-in-image is refused); an image's watcher is looked for
	// in the rootfs directory --image names.
	CapHostWatcherOnly
	// CapImageOptional: the runtime runs a box without --image (native: on
	// the host's root); its ImageChecker checks an image that is given.
	CapImageOptional
	// CapHostPorts: the runtime honours --host-port (Box.HostPorts); any
	// other runtime refuses it.
	CapHostPorts
	// CapNoHostProcesses: the box's processes are not the host's (a
	// microVM): HostPID is always 0, and prove-deathwatch watches the
	// agent die through the runtime's hostcheck.ProcessCounter (it
	// refuses a runtime without one).
	CapNoHostProcesses
)

// Has reports whether the runtime declares every capability of c.
func (d Descriptor) Has(c Capability) bool { return d.Caps&c == c }

// CapIf is c when cond holds, else none: a capability that depends on
// the host (native: Volatile by where its records live).
func CapIf(cond bool, c Capability) Capability {
	if cond {
		return c
	}
	return 0
}

var (
	registryMu sync.Mutex
	registry   = map[string]*Descriptor{}
)

// Register makes a runtime available to --runtime NAME. Runtime
// packages call it from init; a second registration of a name panics.
func Register(d Descriptor) {
	if d.Name == "" || d.New == nil {
		panic("supervisor.Register: a runtime needs a name and a factory")
	}
	if d.Installed == nil {
		d.Installed = func([]string) error { return nil }
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[d.Name]; dup {
		panic("supervisor.Register: runtime " + d.Name + " registered twice")
	}
	registry[d.Name] = &d
}

// Lookup returns the descriptor of the runtime called name.
func Lookup(name string) (Descriptor, bool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	d, ok := registry[name]
	if !ok {
		return Descriptor{}, false
	}
	return *d, true
}

// Volatile reports whether nothing of a box of runtime outlives the
// host's power (CapVolatile): the journal does not sync its entries.
func Volatile(runtime string) bool {
	d, ok := Lookup(runtime)
	return ok && d.Has(CapVolatile)
}

// Descriptors lists the registered runtimes, sorted by name.
func Descriptors() []Descriptor {
	registryMu.Lock()
	defer registryMu.Unlock()
	out := make([]Descriptor, 0, len(registry))
	for _, d := range registry {
		out = append(out, *d)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// RuntimeNames lists the registered runtimes, sorted.
func RuntimeNames() []string {
	var names []string
	for _, d := range Descriptors() {
		names = append(names, d.Name)
	}
	return names
}

// AutoOrder is the order --runtime auto probes in.
func AutoOrder() []string {
	ds := Descriptors()
	sort.SliceStable(ds, func(a, b int) bool { return ds[a].AutoRank < ds[b].AutoRank })
	var names []string
	for _, d := range ds {
		if d.AutoRank > 0 {
			names = append(names, d.Name)
		}
	}
	return names
}

// NewRuntime constructs the runtime called name.
func NewRuntime(name string, cfg RuntimeConfig) (Runtime, error) {
	d, ok := Lookup(name)
	if !ok {
		return nil, exitcode.Usage("--runtime %s: not one of %v", name, RuntimeNames())
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	rt, err := d.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", name, err)
	}
	return rt, nil
}

// ImageChecker is implemented by runtimes that can tell, before
// anything is created, whether an image exists. The lifecycle calls it
// after Probe; a missing image is an *ExitError with shared.ExitImage.
type ImageChecker interface {
	CheckImage(ctx context.Context, image string) error
}

// OneStepStarter is implemented by runtimes that can create a box and
// start it attached with one engine client (`podman run`), where every
// engine process costs tens of milliseconds: a probe, an image check, a
// create and a start would be four. The lifecycle asks OneStep instead
// of Probe (--runtime auto asks both: it must know that the engine
// works before it picks it over the next); when it says yes, CheckImage,
// Create and Start are not called: CreateStart creates and starts the
// box after the intent is journaled, and a missing image or an engine
// that does not work is its error (exitcode.Image, exitcode.Engine) as it would
// have been theirs.
type OneStepStarter interface {
	// OneStep reports whether CreateStart serves (the engine as this
	// process reaches it), with what the lifecycle must know before
	// anything exists: whether the engine is there, and rootless. ok
	// false: Probe, CheckImage, Create and Start serve, and info and err
	// mean nothing.
	OneStep(ctx context.Context) (info Info, ok bool, err error)
	// CreateStart starts the engine client that creates the box and
	// starts it attached, and returns at once; created returns once the
	// box exists (nil), or the client ended without creating it (why:
	// nothing of the box exists then).
	CreateStart(ctx context.Context, b *Box) (st *Started, created func() error, err error)
}

// Admitter is implemented by runtimes that can tell, before anything
// is journaled or created, that they could not honour the box as asked:
// a memory or pids limit that would be silently ignored, a mount the
// engine would bind from another file than the one the supervisor names
// (a rootless daemon's own copy of /etc or /run). Admit refuses it
// (shared.ExitRefused unless the error carries another status).
type Admitter interface {
	Admit(ctx context.Context, b *Box) error
}

// LaunchHooks is a runtime that takes part in a launch at fixed points
// beyond the Runtime interface (docker: its live FIFO, and ending a
// rootless daemon's box without the engine). The lifecycle calls them
// in this order:
//
//	Arm       the intent is journaled, before Create (or CreateStart):
//	          it may add to the box what Create applies and to the
//	          spec what the watcher is asked
//	Ready     the agent started; it must not block
//	End       the stream ended without the watcher's exit record after
//	          ready (the engine died under the box?): kill the box's
//	          PID 1 without the engine, wait until it is gone, and say
//	          what of the engine is left for reconcile (a shim), or ""
//	Release   the engine client is let go, before Remove; and at once
//	          when the box is ended at once (the controller lost, a
//	          second signal, the deadline's backstop), beside the
//	          stream's close. It may run twice.
type LaunchHooks interface {
	Arm(ctx context.Context, b *Box, s *shared.Spec)
	Ready(ctx context.Context, b *Box)
	End(b *Box) (left string, err error)
	Release(b *Box)
}

// Preparer is implemented by runtimes that work on the box before its
// intent is journaled, when nothing exists yet: refuse what they cannot
// honour (one line, nothing to clean up), name the box themselves
// (b.Name), record state that the journal must hold from the start
// (b.State) and ask for mount-bridge links (b.Links).
type Preparer interface {
	Prepare(ctx context.Context, b *Box) error
}
