// Package supervisor is the host half of deathwatch as a library: the
// lifecycle of one box and the contract a runtime implements. Its surface:
//
//   - Exec(ctx, ExecOptions) (Result, error) runs one box to its end;
//     ExecOptions (the box; zero values take the documented defaults,
//     WithDefaults shows them) and ExecIO (what Exec talks to: output,
//     signals, stdin, events). Result and Timings say how it ended; an
//     error carries its exit status as an *ExitError (errors.As), the
//     causes of shared.ExitTable.
//   - Events: Event, Events, OpenEvents and EventsVersion, the
//     line-delimited JSON of --events (docs/schemas), also delivered to
//     ExecIO.OnEvent.
//   - Init, first in a controller's main: the native runtime's hidden
//     re-exec modes start there, never a second copy of the caller.
//   - Runtime registration: Register a Descriptor (its Capability set,
//     Bounds, a RuntimeFactory taking a RuntimeConfig) for a Runtime
//     that makes Boxes with Mounts; a runtime implements the optional
//     interfaces it can (ImageChecker, Admitter, Preparer,
//     OneStepStarter, LaunchHooks, WritableReporter). Lookup,
//     Descriptors, RuntimeNames and NewRuntime read the registry.
//   - Parties: features that ride on the control stream
//     (ExecOptions.Parties; copy-in/out in supervisor/copy).
//
// Reconcile and the listing of an instance's boxes are in
// deathwatch/supervisor/reconcile (Run, List); the runtimes live in
// supervisor/runtime/..., the verbs that check a host in
// supervisor/hostcheck, the command line in supervisor/cli, and the
// helpers these share in supervisor/internal/..., which a controller
// outside supervisor/ cannot import.
package supervisor

import (
	"context"
	"io"

	"deathwatch/shared"
)

// WatcherEnv is what every runtime adds to the watcher's own
// environment (never the agent's, which comes from the spec alone), to
// keep PID 1's resident memory down; nothing in it is secret:
//   - GOMAXPROCS=1: PID 1 does nothing in parallel, and one P keeps its
//     threads down;
//   - GODEBUG=profstackdepth=0: the runtime gives no thread its
//     profiling stack buffers (the watcher never profiles; no
//     //go:debug line can set it).
var WatcherEnv = []string{"GOMAXPROCS=1", "GODEBUG=profstackdepth=0"}

// WatcherMountPoint is where a runtime that bind-mounts the host's
// watcher puts it in the box; /dw is reserved for deathwatch, and
// --mount may not target it.
const WatcherMountPoint = "/dw/watcher"

// Mount is one bind mount into the box.
type Mount struct {
	Source   string // host path
	Target   string // path inside the box
	ReadOnly bool
}

// HostIDs are a host uid and gid.
type HostIDs struct{ UID, GID uint32 }

// Box is everything a runtime needs to create and start one box. The
// lifecycle works it out from the flags as plain data; a runtime only
// applies it. It never holds the agent's environment: that travels in
// the spec frame alone.
type Box struct {
	Name     string            // run-scoped, unique
	LaunchID string            // journal key
	Nonce    string            // random, journaled before create
	Labels   map[string]string // shared.Label* keys and the user's --label
	Image    string            // docker/podman image; native: rootfs dir ("" = host root read-only)

	WatcherPath    string // host path of the static watcher, bind-mounted read-only as the entrypoint
	WatcherInImage string // path of a watcher baked into the image (then WatcherPath is unused)

	Workdir   string
	Mounts    []Mount
	Memory    int64  // bytes; 0 = none asked (the runtime's default bound, DefaultMemory, where it can enforce one)
	PidsLimit int64  // 0 = none asked (DefaultPidsLimit where the runtime can enforce it)
	Network   string // none | bridge | host
	// NetworkSet: the user named Network (--network); a runtime that has
	// no engine network refuses any explicit mode.
	NetworkSet bool
	// AllowHostNetwork accepts Network "host", which opens the host's
	// loopback to the agent, and its abstract unix sockets on a kernel
	// without Landlock scopes (HostNetworkRefusal otherwise, on every
	// runtime).
	AllowHostNetwork bool
	// AgentUID and AgentGID are the ids the agent runs as in the box
	// (the spec's), for a runtime that maps them (native: idmapped
	// mounts, per-box id slots). 0:0 is unset: shared.DefaultAgentUID:GID.
	AgentUID, AgentGID uint32
	// MountOwner is the host account the operator names (--mount-owner)
	// as the one the agent may act as in a --mount folder it owns (a
	// runtime with idmapped mounts: native as root); nil: none, and no
	// host id is ever mapped onto the agent.
	MountOwner *HostIDs
	// OwnIDs, set by a runtime at Create (or CreateStart), are ids of
	// the box's own that replace the spec's agent ids: a runtime whose
	// boxes run on the host's own ids gives each box ids no account and
	// no other live box has. nil: the spec's ids stand.
	OwnIDs *OwnIDs
	// ReadWriteRoot: the box's root file system is writable
	// (--read-write-root); by default it is read-only, and /tmp and
	// /dev/shm are bounded tmpfs (TmpfsBytes, ShmBytes).
	ReadWriteRoot bool
	// HostPorts are the ports on the host's loopback the box may reach
	// (--host-port); only a runtime whose descriptor says HostPorts gets
	// any.
	HostPorts []int
	// Links are mount-bridge links a Preparer asks the watcher to make
	// (a target the runtime cannot mount at, as a link to where it did);
	// the lifecycle puts them into the spec.
	Links []shared.Link

	// State a runtime records for itself (native: the cgroup path);
	// it is journaled so that reconcile can find the box again.
	State map[string]string
}

// OwnIDs are a box's own agent and watcher ids (Box.OwnIDs).
type OwnIDs struct {
	AgentUID, AgentGID     uint32
	WatcherUID, WatcherGID uint32
}

// The bounds every box gets where its runtime can enforce them and the
// user asked for none. A fixed memory bound behaves the same on every
// host and engine (the engine may run in a VM whose memory the
// supervisor cannot see) and holds a build or a test suite; --memory
// raises it. The pids bound stops a fork bomb far above what a build
// starts. /tmp and /dev/shm are tmpfs of these sizes (their pages count
// against the memory bound).
const (
	DefaultMemory    = 4 << 30
	DefaultPidsLimit = 4096
	TmpfsBytes       = 1 << 30
	TmpfsInodes      = 262144
	ShmBytes         = 256 << 20
)

// Info is what a runtime's probe found.
type Info struct {
	Runtime  string // docker | podman | native | sbx
	Present  bool
	Version  string
	Rootless bool
	Detail   string // why it is unusable, or what to do
}

// Started is a running box as the supervisor holds it.
type Started struct {
	// Control carries frames both ways. The supervisor holds the only
	// write end of the box's side; Close drops it (the watcher sees EOF).
	// A Control that can end its write half alone (a CloseWrite method,
	// as Kubernetes' exec session of the watcher's relay) is told to once
	// the exit record has arrived, so the box's side ends without waiting.
	Control io.ReadWriteCloser
	// Wait returns when the local process that carries the stream (the
	// engine client, or the native box's init) has exited.
	Wait func() error
	// Kill ends that local process and everything in its process group.
	Kill func()
}

// Listed is a box a runtime reports, for reconcile.
type Listed struct {
	Name    string
	Labels  map[string]string
	Running bool
}

// Runtime is one way of making boxes. Every argv a runtime hands to an
// engine CLI comes from a pure builder with a table test.
type Runtime interface {
	Name() string
	Probe(ctx context.Context) (Info, error)
	Create(ctx context.Context, b *Box) error
	Start(ctx context.Context, b *Box) (*Started, error)
	// Remove removes the box; a box that does not exist is not an error.
	Remove(ctx context.Context, b *Box) error
	// List returns the boxes that carry instance's label.
	List(ctx context.Context, instance string) ([]Listed, error)
	// Exists reports whether anything of the box is still there (the
	// container, or the native box's cgroup and record). b may come
	// from the journal (Name and State only).
	Exists(ctx context.Context, b *Box) (bool, error)
	// HostPID is the host pid of the box's PID 1 (its watcher), or 0
	// when the box has none this host can see (a microVM, a remote
	// engine, a box that is gone).
	HostPID(ctx context.Context, b *Box) (int, error)
}
