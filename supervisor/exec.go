package supervisor

// The lifecycle of `supervisor exec`, every step real:
//
//	validate → probe the engine ∥ check the image → journal the intent
//	→ create → start attached (own process group; the stdin pipe's only
//	write end is ours) → hello + spec (env only here) → pings → relay
//	→ exit record → on every path: journal removal intent → remove →
//	journal the removal.
//
// For a runtime whose intent alone finds its boxes (Descriptor.
// IntentFinds: docker, podman) the intent is written beside the probe
// and image check when the runtime is named, and the created and
// started writes beside the attach and start and the handshake: each
// waits only for the write before it, and the box is created only once
// the intent is durable.
//
// A one-step runtime (OneStepStarter: `podman run`) has no separate
// probe, image check, create and start: after the intent is journaled
// one engine client creates the box and starts it attached, and finds a
// missing image itself.
//
// After a SIGKILL of the supervisor the engine client reads EOF, the
// watcher kills the box, and the engine's auto-remove removes it; the
// journal entry stays open for reconcile.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"deathwatch/shared"
	"deathwatch/shared/seccomp"
	"deathwatch/supervisor/controller"
)

// ExecOptions is `supervisor exec` worked out as plain data. It holds
// the agent's environment (AgentEnv) only to put it into the spec frame.
type ExecOptions struct {
	Instance   string
	JournalDir string
	Runtime    string // a registered runtime's name, or auto ("")
	Image      string
	NamePrefix string
	Labels     map[string]string // the user's --label (never io.deathwatch.*)
	RunKey     string
	AgentEnv   []string // NAME=value, for the spec frame only: secrets
	Workdir    string
	Mounts     []Mount
	MountOwner *HostIDs // --mount-owner (Box.MountOwner)
	Memory     int64
	PidsLimit  int64
	Network    string
	NetworkSet bool  // Network was given explicitly
	HostPorts  []int // host loopback ports the box may reach (runtimes with Descriptor.HostPorts)
	Deadline   time.Duration
	Grace      time.Duration
	Heartbeat  time.Duration

	AllowRootful   bool
	AllowUserns    bool   // the agent may make nested user namespaces
	WatcherPath    string // host watcher to bind-mount
	WatcherInImage string // watcher baked into the image
	UID, GID       uint32
	Argv           []string

	// TTY runs the agent on a pty in the box, Rows x Cols at the start
	// (0: unknown); Stdin gives it a pipe. Either way ExecIO.Stdin is
	// its input.
	TTY        bool
	Rows, Cols uint16
	Stdin      bool

	// AllowHostNetwork accepts --network host, which opens the host's
	// loopback to the agent, and its abstract unix sockets on a kernel
	// without Landlock scopes (every runtime).
	AllowHostNetwork bool
	// ReadWriteRoot makes the box's root file system writable
	// (--read-write-root); it is read-only by default.
	ReadWriteRoot bool
	// RequireLandlock refuses a box whose kernel lacks Landlock's write
	// limits or scopes (--require-landlock; Spec.RequireLandlock).
	RequireLandlock bool

	// Parties ride on the control stream beside the lifecycle (Party:
	// copy-in and copy-out, supervisor/copy).
	Parties []Party

	// Controller is the link whose end ends the box (controller.Spec).
	// The zero value watches nothing: a Go controller that calls Exec in
	// its own process is the process whose death ends the box (the
	// engine client or the native box's stream dies with it), so the
	// library needs no watch. The CLI watches the supervisor's parent
	// process by default (--controller-fd, --controller-pid, --detach).
	Controller controller.Spec
}

// The bounds a box gets when its options do not say otherwise: no box
// may survive a frozen controller for ever. A controller that freezes
// (a hung event loop, a paused VM, a half-open attach) keeps its
// control stream open, so EOF never comes; the heartbeat ends its boxes
// after DefaultHeartbeat of silence, and the in-box deadline ends any
// box whose watch failed at a known time.
const (
	// DefaultHeartbeat is the silence after which the watcher kills the
	// box; the supervisor pings every third of it. 10 s costs a wake-up
	// of each side every 3.3 s (make bench prints the CPU) and survives a
	// GC pause, a short SIGSTOP or a host at load 8 without a false kill.
	DefaultHeartbeat = 10 * time.Second
	// DefaultDeadline is the in-box deadline: GitLab CI's default job
	// timeout, long enough for a build or an agent's turn, short enough
	// that a box whose watch failed ends the same working hour.
	DefaultDeadline = time.Hour
	// DefaultGrace is exec's TERM-to-KILL grace (the CLI's --grace).
	DefaultGrace = 2 * time.Second
	// Disabled, as ExecOptions.Heartbeat or Deadline, turns that bound
	// off (0 takes the default).
	Disabled time.Duration = -1
)

// WithDefaults is o with the default bounds filled in: a zero Heartbeat
// or Deadline takes DefaultHeartbeat or DefaultDeadline, Disabled turns
// it off (0 in the spec).
func (o ExecOptions) WithDefaults() ExecOptions {
	o.Heartbeat = withDefault(o.Heartbeat, DefaultHeartbeat)
	o.Deadline = withDefault(o.Deadline, DefaultDeadline)
	return o
}

func withDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// Survival is how long a box can outlive its controller with the given
// bounds (0: off): a killed controller's box ends within the runtime's
// own dead bound; a frozen controller's within Heartbeat plus that
// bound; a box whose watch failed at Deadline + Grace.
type Survival struct {
	Heartbeat, Deadline, Grace time.Duration
}

// Unbounded: nothing but the controller's death ends the box.
func (s Survival) Unbounded() bool { return s.Heartbeat <= 0 && s.Deadline <= 0 }

// Statement says the bounds in a line, slack being the runtime's
// measured or default dead bound.
func (s Survival) Statement(slack time.Duration) string {
	var frozen, failed string
	switch {
	case s.Heartbeat > 0:
		frozen = fmt.Sprintf("a frozen controller's boxes die within %v + %v", s.Heartbeat, slack)
	case s.Deadline > 0:
		frozen = "a frozen controller's boxes live until the deadline (no heartbeat)"
	default:
		frozen = "a frozen controller's boxes live for ever (no heartbeat, no deadline)"
	}
	if s.Deadline > 0 {
		failed = fmt.Sprintf("a failed watch ends at %v + %v", s.Deadline, s.Grace)
	} else {
		failed = "a failed watch never ends (no deadline)"
	}
	return frozen + "; " + failed
}

// warning is the line exec prints when a bound is off, "" when none is.
func (s Survival) warning() string {
	switch {
	case s.Unbounded():
		return "warning: --heartbeat 0 and --deadline 0: nothing but the supervisor's death ends this box; a frozen supervisor leaves it running for ever"
	case s.Heartbeat <= 0:
		return fmt.Sprintf("warning: --heartbeat 0: a frozen supervisor leaves this box running until its deadline (%v)", s.Deadline)
	}
	return ""
}

// ExecIO is what exec talks to. Tests fill it with buffers and a
// signal channel they control.
type ExecIO struct {
	Stdout, Stderr io.Writer
	Log            *slog.Logger
	Events         *Events // --events: line-delimited JSON (nil: none)
	// OnEvent, when set, receives every lifecycle event as it happens,
	// the same ones Events writes: a controller written in Go calls Exec
	// directly and reads the box's exit (code and reason) from the
	// exited event and the removal from the removed event.
	OnEvent func(Event)
	// Signals delivers SIGINT, SIGTERM and SIGHUP: the first asks the
	// watcher to stop the agent (TERM, grace, KILL); the second ends the
	// box at once. SIGUSR1 and SIGUSR2 are passed on to the agent.
	Signals <-chan os.Signal
	// EngineEnv is the environment for engine CLIs (nil: the process's
	// own). It never holds the agent's variables.
	EngineEnv []string
	// Stdin is the agent's input with ExecOptions.TTY or Stdin (nil: an
	// empty input), read once the agent started; its end is the agent's
	// stdin-eof. A read that is blocked when the box ends stays so.
	Stdin io.Reader
	// Resize delivers the host terminal's new size (on SIGWINCH) with
	// TTY; the box gets the latest once the agent started.
	Resize <-chan shared.Resize
	// ProveBind runs the bind proof for the live FIFO (livefifo.go)
	// when this engine has no verdict yet; nil offers no live FIFO.
	ProveBind BindProver
	// Controller is a link to the controller already taken
	// (WatchController): the CLI takes it before anything else. nil:
	// Exec takes ExecOptions.Controller's.
	Controller *controller.Watch
}

// WatchController takes the link to the controller that s asks for
// (nil for none): exec's first step, before anything is created. A
// controller already gone is ExitControllerLost; a descriptor or pid
// that cannot be watched is a usage error.
func WatchController(s controller.Spec) (*controller.Watch, error) {
	crashpoint(CrashBeforeWatch)
	w, err := controller.Take(s)
	switch {
	case errors.Is(err, controller.ErrGone):
		return nil, WithCode(shared.ExitControllerLost, fmt.Errorf("%w; no box was started", err))
	case err != nil && s.Parent && !s.HasFD && s.PID == 0:
		return nil, SetupError("%w", err)
	case err != nil:
		return nil, UsageError("%w", err)
	}
	return w, nil
}

// Spec is the launch spec the options ask for, without what the
// parties add (Party.Spec).
func (o *ExecOptions) Spec() shared.Spec {
	return shared.Spec{
		Argv:      o.Argv,
		Env:       o.AgentEnv,
		Workdir:   o.Workdir,
		UID:       o.UID,
		GID:       o.GID,
		Deadline:  o.Deadline,
		Grace:     o.Grace,
		Heartbeat: o.Heartbeat,

		AllowUserns:     o.AllowUserns,
		RequireLandlock: o.RequireLandlock,

		TTY:   o.TTY,
		Rows:  o.Rows,
		Cols:  o.Cols,
		Stdin: o.Stdin,
	}
}

// Exec runs one box end to end and returns the supervisor's exit status:
// the library form of `supervisor exec`, with the same events, journal
// entry and exit record. The runtimes a caller wants must be registered:
// import their packages (supervisor/runtime/docker, .../native), as
// supervisor/cli/runtimes.go does.
//
// A zero Heartbeat or Deadline takes its default (WithDefaults);
// Disabled turns it off, and Exec then says so on Stderr.
func Exec(ctx context.Context, o *ExecOptions, x *ExecIO) int {
	if x.Log == nil {
		x.Log = slog.New(slog.DiscardHandler)
	}
	fail := func(err error, def int) int {
		fmt.Fprintf(x.Stderr, "supervisor: %s\n", shared.Printable(err.Error()))
		return ExitCode(err, def)
	}
	withDefaults := o.WithDefaults()
	o = &withDefaults
	if x.Controller == nil {
		w, err := WatchController(o.Controller)
		if err != nil {
			return fail(err, shared.ExitUsage)
		}
		defer w.Close()
		x.Controller = w
	}
	if x.Controller != nil && x.Controller.Link == controller.LinkDetached {
		fmt.Fprintf(x.Stderr, "supervisor: warning: --detach: the controller is not watched; its death leaves this box running until the heartbeat (%v) or the deadline (%v) ends it\n", o.Heartbeat, o.Deadline)
	}
	if w := (Survival{o.Heartbeat, o.Deadline, o.Grace}).warning(); w != "" {
		fmt.Fprintf(x.Stderr, "supervisor: %s\n", w)
	}
	spec := o.Spec()
	for _, p := range o.Parties {
		p.Spec(&spec)
	}
	// The box's walls: every agent gets the syscall filter (compiled
	// here, installed by the watcher). A pids limit the watcher cannot
	// live under is a usage error; so are a spec over one frame and
	// overlong durations (Validate); the watcher's own uid or gid for
	// the agent is a refusal.
	spec.Seccomp = seccomp.Default(spec.AllowUserns)
	if err := shared.CheckPidsLimit(o.PidsLimit); err != nil {
		return fail(UsageError("%w", err), shared.ExitUsage)
	}
	for _, p := range o.Parties {
		if err := p.Check(); err != nil {
			return fail(err, shared.ExitUsage)
		}
	}
	if o.Network == "host" && !o.AllowHostNetwork {
		return fail(RefusedError("%s", HostNetworkRefusal), shared.ExitRefused)
	}
	if err := spec.Validate(); err != nil {
		if refused := (*shared.RefusedError)(nil); errors.As(err, &refused) {
			return fail(RefusedError("--user %d:%d: %v", o.UID, o.GID, refused.Why), shared.ExitRefused)
		}
		var root *shared.RootRefusedError
		if errors.As(err, &root) {
			return fail(RefusedError("--user %d:%d: the agent never runs as root (uid or gid 0); pick another UID:GID", o.UID, o.GID), shared.ExitRefused)
		}
		return fail(UsageError("%w", err), shared.ExitUsage)
	}
	if d, _ := Lookup(o.Runtime); d.ImageWatcher != "" {
		// The box cannot take the host's watcher: the image's it is.
		if o.WatcherInImage == "" {
			o.WatcherInImage = d.ImageWatcher
		}
		o.WatcherPath = ""
	}
	if d, _ := Lookup(o.Runtime); !d.HostWatcherOnly && o.WatcherInImage == "" && o.WatcherPath == "" {
		return fail(UsageError("no watcher binary: put `watcher` next to the supervisor or on PATH, or pass --watcher PATH or --watcher-in-image PATH"), shared.ExitUsage)
	}

	tail := &tailWriter{w: x.Stderr}
	cfg := RuntimeConfig{Log: x.Log, Stderr: tail, EngineEnv: x.EngineEnv}
	owner, err := SelfOwner()
	if err != nil {
		return fail(SetupError("%w", err), shared.ExitSetupFailed)
	}
	j, err := OpenJournal(o.JournalDir, o.Instance)
	if err != nil {
		return fail(WithCode(ExitCode(err, shared.ExitSetupFailed), err), shared.ExitSetupFailed)
	}
	box := newBox(o)
	l := &launch{
		o: o, x: x, box: box, j: j, spec: spec, tail: tail,
		entry: &JournalEntry{
			LaunchID: box.LaunchID, Instance: o.Instance, RunKey: o.RunKey, Box: box.Name,
			Runtime: o.Runtime, Image: o.Image, Nonce: box.Nonce, Labels: box.Labels, Owner: owner,
			Controller: controllerRecord(x.Controller, owner), State: StateIntent, Created: time.Now().UTC(),
		},
		ctrl: x.Controller,
	}
	if d, _ := Lookup(o.Runtime); d.IntentFinds {
		// The runtime is named and its intent needs nothing the probe
		// finds: the intent is written beside the probe and the image
		// check (engine round trips; a probe creates nothing), and run
		// waits for it before anything is created. A launch that ends
		// before run drops it: nothing was created.
		l.beside, l.earlyIntent = true, true
		l.journalBeside(StateIntent)
		defer l.dropIntent()
	}
	p, err := pickRuntime(ctx, o, cfg)
	if err != nil {
		return fail(err, shared.ExitEngine)
	}
	rt, info := p.rt, p.info
	d, _ := Lookup(rt.Name())
	l.rt, l.oneStep, l.beside, l.entry.Runtime = rt, p.oneStep, d.IntentFinds, rt.Name()
	x.Log.Info("runtime", "name", rt.Name(), "version", info.Version, "rootless", info.Rootless)
	if p.chosen != "" {
		l.say("%s", p.chosen)
	}
	if len(o.HostPorts) > 0 && !d.HostPorts {
		return fail(RefusedError("--host-port: runtime %s cannot scope a box's reach to one host port; drop --host-port or use a runtime that can", rt.Name()), shared.ExitRefused)
	}
	if lc, ok := rt.(LimitsChecker); ok {
		if err := lc.CheckLimits(o.Memory, o.PidsLimit); err != nil {
			return fail(err, shared.ExitRefused)
		}
	}
	if mc, ok := rt.(MountChecker); ok {
		if err := mc.CheckMounts(ctx, box); err != nil {
			return fail(err, shared.ExitRefused)
		}
	}
	if p, ok := rt.(Preparer); ok {
		if err := p.Prepare(ctx, box); err != nil {
			return fail(err, shared.ExitRefused)
		}
		l.entry.Box = box.Name // the runtime may name the box
		// An intent written beside the probe named the box as it was:
		// run writes it again, as it stands now.
		l.earlyIntent = false
		if len(box.Links) > 0 {
			l.spec.Links = append(l.spec.Links, box.Links...)
			if err := l.spec.Validate(); err != nil {
				return fail(UsageError("%w", err), shared.ExitUsage)
			}
		}
	}
	if err := l.limitWrites(); err != nil {
		return fail(err, shared.ExitUsage)
	}
	return l.run(ctx)
}

// newBox is the launch's identity: a fresh launch id and nonce, the
// box's name and labels, and what the options ask of it.
func newBox(o *ExecOptions) *Box {
	launchID := NewLaunchID()
	nonce := RandHex(16)
	prefix := o.NamePrefix
	if prefix == "" {
		prefix = "dw"
	}
	labels := map[string]string{}
	for k, v := range o.Labels {
		labels[k] = v
	}
	labels[shared.LabelManaged] = "true"
	labels[shared.LabelInstance] = o.Instance
	labels[shared.LabelLaunchID] = launchID
	labels[shared.LabelNonce] = nonce
	if o.RunKey != "" {
		labels[shared.LabelRunKey] = o.RunKey
	}
	return &Box{
		Name:           prefix + "-" + launchID,
		LaunchID:       launchID,
		Nonce:          nonce,
		Labels:         labels,
		Image:          o.Image,
		WatcherPath:    o.WatcherPath,
		WatcherInImage: o.WatcherInImage,
		Workdir:        o.Workdir,
		Mounts:         o.Mounts,
		MountOwner:     o.MountOwner,
		Memory:         o.Memory,
		PidsLimit:      o.PidsLimit,
		Network:        o.Network,
		NetworkSet:     o.NetworkSet,
		HostPorts:      o.HostPorts,
		State:          map[string]string{},

		AllowHostNetwork: o.AllowHostNetwork,
		ReadWriteRoot:    o.ReadWriteRoot,
		AgentUID:         o.UID,
		AgentGID:         o.GID,
	}
}

// picked is the runtime exec drives and what its probe found; oneStep:
// its OneStep said yes (CreateStart creates and starts the box).
type picked struct {
	rt      Runtime
	info    Info
	oneStep bool
	chosen  string // auto: the line that says what it chose and why
}

func pickRuntime(ctx context.Context, o *ExecOptions, cfg RuntimeConfig) (picked, error) {
	// try probes one runtime; refuseRootful applies --allow-rootful.
	try := func(name string, refuseRootful bool) (picked, error) {
		rt, err := NewRuntime(name, cfg)
		if err != nil {
			return picked{}, err
		}
		d, _ := Lookup(name)
		if _, ok := rt.(ImageChecker); ok && o.Image == "" && !d.ImageOptional {
			return picked{}, UsageError("--image is required for --runtime %s", name)
		}
		// usable says whether the probe found the engine usable.
		usable := func(info Info, err error) error {
			if err != nil {
				return WithCode(ExitCode(err, shared.ExitEngine), err)
			}
			if !info.Present {
				d := info.Detail
				if d == "" {
					d = name + " is not available"
				}
				return EngineError("%s", d)
			}
			if refuseRootful && d.Daemon && !info.Rootless && !o.AllowRootful {
				return RefusedError("%s engine is rootful (a box escape is root on the host); pass --allow-rootful to accept a shared-root boundary, or use rootless %s", name, name)
			}
			return nil
		}
		if one, ok := rt.(OneStepStarter); ok {
			// One engine client creates and starts the box, and finds a
			// missing image itself: no probe, no image check of its own.
			// Except for --runtime auto, which must know that an engine
			// works before it picks it over the next one: it probes.
			if info, yes, err := one.OneStep(ctx); yes {
				if err == nil && !refuseRootful {
					info, err = rt.Probe(ctx)
				}
				if err := usable(info, err); err != nil {
					return picked{info: info}, err
				}
				if ic, ok := rt.(ImageChecker); ok && !refuseRootful {
					// auto picks an engine only when the image is there.
					if err := ic.CheckImage(ctx, o.Image); err != nil {
						return picked{info: info}, WithCode(ExitCode(err, shared.ExitImage), err)
					}
				}
				return picked{rt: rt, info: info, oneStep: true}, nil
			}
		}
		// The image check runs beside the probe (two engine round trips
		// in the time of one); its verdict counts only once the engine
		// is known to be usable.
		imageErr := make(chan error, 1)
		ictx, cancel := context.WithCancel(ctx)
		defer func() {
			// Leave no engine call running behind us.
			cancel()
			<-imageErr
		}()
		if ic, ok := rt.(ImageChecker); ok {
			go func() { imageErr <- ic.CheckImage(ictx, o.Image) }()
		} else {
			imageErr <- nil
		}
		info, err := rt.Probe(ctx)
		if err := usable(info, err); err != nil {
			return picked{info: info}, err
		}
		if err := <-imageErr; err != nil {
			imageErr <- nil
			return picked{info: info}, WithCode(ExitCode(err, shared.ExitImage), err)
		}
		imageErr <- nil
		return picked{rt: rt, info: info}, nil
	}
	if o.Runtime != "auto" && o.Runtime != "" {
		return try(o.Runtime, true)
	}
	// auto: in AutoOrder, the first rootless engine that has the image,
	// else the daemonless native runtime, else the first rootful engine
	// with the image when --allow-rootful accepts one.
	var why []string
	var rootful []picked
	noImage := 0
	for _, name := range AutoOrder() {
		d, _ := Lookup(name)
		p, err := try(name, false)
		switch {
		case err != nil:
			why = append(why, err.Error())
			if ExitCode(err, 0) == shared.ExitImage {
				noImage++
			}
		case !d.Daemon || p.info.Rootless:
			p.chosen = AutoChoice(name, p.info.Rootless, why)
			return p, nil
		case o.AllowRootful:
			rootful = append(rootful, p)
		default:
			why = append(why, name+" is rootful (pass --allow-rootful to accept it)")
		}
	}
	if len(rootful) > 0 {
		p := rootful[0]
		p.chosen = AutoChoice(p.rt.Name(), p.info.Rootless, why)
		return p, nil
	}
	err := EngineError("--runtime auto: no usable runtime (%s)", strings.Join(why, "; "))
	if noImage > 0 {
		// An engine works, the image is not in it: load the image.
		return picked{}, WithCode(shared.ExitImage, err)
	}
	return picked{}, err
}

// AutoChoice is the line that says which runtime auto chose and why,
// with what it passed over on the way (exec and doctor say it).
func AutoChoice(name string, rootless bool, passed []string) string {
	s := fmt.Sprintf("--runtime auto chose %s (no daemon)", name)
	if d, _ := Lookup(name); d.Daemon {
		mode := "rootless"
		if !rootless {
			mode = "rootful, accepted by --allow-rootful"
		}
		s = fmt.Sprintf("--runtime auto chose %s (%s, the image present)", name, mode)
	}
	if len(passed) > 0 {
		s += "; passed over: " + strings.Join(passed, "; ")
	}
	return s
}

// NewLaunchID is a sortable, unique launch id: UTC time and 32 random bits.
func NewLaunchID() string {
	return time.Now().UTC().Format("20060102-150405") + "-" + RandHex(4)
}

// RandHex is n random bytes in hex (nonces, launch ids).
func RandHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // cannot happen on Linux ≥ 3.17
	}
	return hex.EncodeToString(b)
}

// launch is one box's lifecycle once its identity is fixed.
type launch struct {
	o       *ExecOptions
	x       *ExecIO
	rt      Runtime
	oneStep bool // rt's CreateStart creates and starts the box
	box     *Box
	j       *Journal
	entry   *JournalEntry
	spec    shared.Spec
	tail    *tailWriter
	ctx     context.Context
	// beside: the created and started writes run beside the engine's
	// next step (Descriptor.IntentFinds); pending is the write in flight.
	beside  bool
	pending chan error
	// earlyIntent: the intent was written beside the probe (Exec), and
	// run has not taken it over yet (dropIntent removes it).
	earlyIntent bool
	// live is the box's live FIFO, nil for none (livefifo.go).
	live *liveFIFO
	// ctrl is the link to the controller (nil: none); its loss ends
	// the box.
	ctrl *controller.Watch
}

// controllerLost says, without waiting, whether the controller is gone.
func (l *launch) controllerLost() bool {
	select {
	case <-l.ctrl.Lost():
		return true
	default:
		return false
	}
}

// lost ends a launch whose controller is gone before the control
// stream took over.
func (l *launch) lost(st *Started) int {
	l.say("%s; the box was ended", l.ctrl.Why())
	if st != nil {
		st.Control.Close()
		st.Kill()
	}
	return l.early(shared.ExitControllerLost, string(shared.ReasonControllerLost), st)
}

func (l *launch) emit(ev Event) {
	ev.Instance, ev.LaunchID, ev.Box, ev.Runtime = l.o.Instance, l.box.LaunchID, l.box.Name, l.rt.Name()
	ev.Time = time.Now().UTC()
	l.x.Events.Emit(ev)
	if l.x.OnEvent != nil {
		l.x.OnEvent(ev)
	}
}

// say writes one line of the supervisor's own; what a box chose in it
// (a file name, the watcher's message) cannot reach the controller's
// terminal as a control sequence (shared.Printable).
func (l *launch) say(format string, args ...any) {
	fmt.Fprintf(l.x.Stderr, "supervisor: %s\n", shared.Printable(fmt.Sprintf(format, args...)))
}

// journal writes the entry in state, after the write in flight (if any)
// landed; it returns the first error of the two.
func (l *launch) journal(state string) error {
	perr := l.settle()
	l.stamp(state)
	if err := l.j.Put(l.entry); err != nil {
		return err
	}
	return perr
}

// journalBeside is journal for the created and started writes of a
// runtime whose intent finds its boxes (Descriptor.IntentFinds): once
// the write before it landed (its error is returned here), it writes a
// copy of the entry in the background, beside the engine's next step —
// the attach and start after created, the watcher's handshake after
// started: each fsync off the launch's path. The next journal (at the
// latest the removal intent) waits for it; a started write that failed
// is said there, and the entry stays open for reconcile (the intent is
// durable: reconcile finds the box by its labels and nonce).
func (l *launch) journalBeside(state string) error {
	if !l.beside {
		return l.journal(state)
	}
	if err := l.settle(); err != nil {
		return err
	}
	l.stamp(state)
	e := *l.entry
	e.RuntimeState = maps.Clone(e.RuntimeState)
	done := make(chan error, 1)
	l.pending = done
	go func() { done <- l.j.Put(&e) }()
	return nil
}

// stamp sets the entry's state, and what the runtime recorded.
func (l *launch) stamp(state string) {
	l.entry.State = state
	if len(l.box.State) > 0 {
		l.entry.RuntimeState = l.box.State
	}
}

// settle waits for the write in flight, if any, and returns its error.
func (l *launch) settle() error {
	if l.pending == nil {
		return nil
	}
	err := <-l.pending
	l.pending = nil
	return err
}

// crashAt is crashpoint(point) once the write in flight landed, when
// the test asked for point: the crash-window tests check that the
// journal says the point's state. (Without a test nothing waits: a kill
// there leaves the previous state, which reconcile handles as the kill
// one point earlier.)
func (l *launch) crashAt(point string) {
	if crashArmed(point) && l.pending != nil {
		err := <-l.pending
		l.pending = make(chan error, 1)
		l.pending <- err
	}
	crashpoint(point)
}

// pendingSignal returns a signal that arrived, if any, without waiting.
func (l *launch) pendingSignal() os.Signal {
	select {
	case s := <-l.x.Signals:
		return s
	default:
		return nil
	}
}

// dropIntent removes the intent written beside the probe of a launch
// that ended before run: nothing was created. (A kill before this
// leaves an intent without a box, which reconcile closes.)
func (l *launch) dropIntent() {
	if !l.earlyIntent {
		return
	}
	if l.settle() == nil {
		os.Remove(l.j.path(l.entry.LaunchID))
	}
}

func (l *launch) run(ctx context.Context) int {
	log := l.x.Log.With("box", l.box.Name, "launch", l.box.LaunchID)
	intent := l.settle // written beside the probe (Exec)
	if !l.earlyIntent {
		intent = func() error { return l.journal(StateIntent) }
	}
	l.earlyIntent = false
	if err := intent(); err != nil {
		l.say("%v (nothing was created)", err)
		return shared.ExitSetupFailed
	}
	l.emit(Event{Event: EventJournaled})
	log.Info("journaled", "dir", l.j.Dir())
	crashpoint(CrashAfterJournal)

	if l.controllerLost() {
		return l.lost(nil)
	}
	if s := l.pendingSignal(); s != nil {
		return l.early(signalStatus(s), ReasonSupervisorSignaled, nil)
	}
	l.armLive(ctx)
	// A one-step runtime's client creates and starts the box; created
	// says when the box exists. Its intent is durable before the client
	// starts, so that reconcile can prove the box ours whatever the
	// journal says when the supervisor dies.
	var st *Started
	create := func() error { return l.rt.Create(ctx, l.box) }
	if l.oneStep {
		s, created, err := l.rt.(OneStepStarter).CreateStart(ctx, l.box)
		if err != nil {
			l.say("%v", err)
			return l.early(ExitCode(err, shared.ExitSetupFailed), string(shared.ReasonSetupFailed), nil)
		}
		st, create = s, created
		crashpoint(CrashInRun)
	}
	if err := create(); err != nil {
		l.say("%v", err)
		return l.early(ExitCode(err, shared.ExitSetupFailed), string(shared.ReasonSetupFailed), st)
	}
	if ids := l.box.OwnIDs; ids != nil {
		l.spec.UID, l.spec.GID = ids.AgentUID, ids.AgentGID
	}
	if err := l.journalBeside(StateCreated); err != nil {
		l.say("%v", err)
		return l.early(shared.ExitSetupFailed, string(shared.ReasonSetupFailed), st)
	}
	l.emit(Event{Event: EventCreated})
	log.Info("created")
	if l.box.Network == "bridge" {
		l.say("%s", BridgeNetworkWarning)
	}
	l.crashAt(CrashAfterCreate)
	if l.controllerLost() {
		return l.lost(st)
	}
	if s := l.pendingSignal(); s != nil {
		return l.early(signalStatus(s), ReasonSupervisorSignaled, st)
	}
	l.ctx = ctx
	pl := &PartyLaunch{Box: l.box, Runtime: l.rt, OneStep: l.oneStep, Log: l.x.Log, Say: l.say, Emit: l.emit}
	for _, p := range l.o.Parties {
		p.Created(ctx, pl, &l.spec)
	}

	if st == nil {
		var err error
		if st, err = l.rt.Start(ctx, l.box); err != nil {
			l.say("%v", err)
			return l.early(ExitCode(err, shared.ExitSetupFailed), string(shared.ReasonSetupFailed), nil)
		}
	}
	// (journalBeside: the created write, if it still ran, failed here.)
	if err := l.journalBeside(StateStarted); err != nil {
		l.say("%v", err)
		st.Control.Close()
		st.Kill()
		return l.early(shared.ExitSetupFailed, string(shared.ReasonSetupFailed), st)
	}
	l.emit(Event{Event: EventStarted})
	log.Info("started")
	l.crashAt(CrashAfterStart)
	return l.finish(l.attend(st, log), st)
}

// early ends a launch that failed or was interrupted before the
// control stream took over: the exit is journaled and announced like
// any other, then the box is removed.
func (l *launch) early(code int, reason string, st *Started) int {
	l.entry.Exit = &JournalExit{Code: code, Reason: reason}
	l.emit(Event{Event: EventExited, Code: ptr(code), Reason: reason})
	return l.finish(code, st)
}

// attend speaks the control stream until the box ends, and returns the
// supervisor's exit status.
func (l *launch) attend(st *Started, log *slog.Logger) int {
	w := shared.NewWriter(st.Control)
	// The controller's loss closes the stream at once, from the watch's
	// goroutine: the watcher kills the box while this one is scheduled.
	l.ctrl.OnLost(func() { st.Control.Close() })
	done := make(chan struct{})
	defer close(done)
	ready := make(chan struct{})
	var in *input // the agent's input, when it takes any
	if l.spec.TTY || l.spec.Stdin {
		in = &input{}
	}
	if l.spec.TTY && l.x.Resize != nil {
		go resizes(l.x.Resize, ready, done, w, log)
	}
	// A party's work on the stream (an archive put) stops with it.
	pctx, cancelParties := context.WithCancel(l.ctx)
	defer cancelParties()

	// hello, spec, then pings. A blocked write (a box that never reads)
	// must not block the loop below, so the writes have a goroutine.
	go func() {
		hello := shared.Hello{Version: shared.ProtocolVersion, Nonce: l.box.Nonce}
		if err := w.Send(shared.FrameHello, hello.Marshal()); err != nil {
			log.Debug("send hello", "err", err)
			return
		}
		if err := w.Send(shared.FrameSpec, l.spec.Marshal()); err != nil {
			log.Debug("send spec", "err", err)
			return
		}
		for _, p := range l.o.Parties {
			p.Sent(pctx, w)
		}
		if l.o.Heartbeat <= 0 {
			return
		}
		t := time.NewTicker(l.o.Heartbeat / 3)
		defer t.Stop()
		for seq := shared.Seq(1); ; seq++ {
			select {
			case <-done:
				return
			case <-t.C:
				if err := w.Send(shared.FramePing, seq.Marshal()); err != nil {
					return
				}
			}
		}
	}()

	type readResult struct {
		exit   *shared.Exit
		ready  bool
		err    error
		outErr error // a write of the agent's output failed
	}
	res := make(chan readResult, 1)
	var readyOnce sync.Once
	go func() {
		var o readResult
		r := shared.NewReader(bufio.NewReaderSize(st.Control, 2*shared.MaxChunk))
		for {
			f, err := r.Next()
			if err != nil {
				if err != io.EOF {
					o.err = err
				}
				break
			}
			switch f.Type {
			case shared.FrameReady:
				rd, err := shared.ParseReady(f.Payload)
				if err != nil {
					o.err = err
					break
				}
				o.ready = true
				readyOnce.Do(func() {
					l.emit(Event{Event: EventReady, PID: rd.PID})
					log.Info("ready", "agent_pid", rd.PID)
					close(ready)
					if en, ok := l.rt.(Ender); ok {
						go en.Pin(l.ctx, l.box)
					}
					// The watcher opened the live FIFO before the agent
					// started: its name is not needed any more.
					l.live.unlink()
					for _, p := range l.o.Parties {
						p.Ready()
					}
					if in != nil {
						go in.pump(l.x.Stdin, w, log)
					}
				})
				continue
			case shared.FrameStdinCredit:
				if in == nil {
					o.err = &shared.ProtocolError{Reason: "stdin-credit from a box that takes no input"}
					break
				}
				if err := in.win.Grant(f.Payload); err != nil {
					o.err = err
					break
				}
				continue
			case shared.FrameStdout, shared.FrameStderr:
				// Output nobody reads is the controller's loss (EPIPE: its
				// end is gone), never dropped.
				out, name := l.x.Stdout, "stdout"
				if f.Type == shared.FrameStderr {
					out, name = l.x.Stderr, "stderr"
				}
				if _, err := out.Write(f.Payload); err != nil {
					o.outErr = fmt.Errorf("write the agent's output to the supervisor's %s: %w", name, err)
					break
				}
				continue
			case shared.FramePong:
				continue
			case shared.FrameExit:
				x, err := shared.ParseExit(f.Payload)
				if err != nil {
					o.err = err
					break
				}
				o.exit = &x
				if in != nil {
					in.end() // no input after the exit record
				}
				continue
			default:
				if o.err = l.partyFrame(f); o.err != nil {
					break
				}
				continue
			}
			break
		}
		if in != nil {
			in.end()
		}
		if o.err != nil || o.outErr != nil {
			// Fail closed: a broken stream ends the box.
			st.Control.Close()
		}
		res <- o
	}()

	var (
		signals  = 0
		lastSig  os.Signal
		hard     <-chan time.Time
		deadline <-chan time.Time
		hardDone bool
		pastDue  bool
		ctrlLost bool
	)
	endNow := func(why string) {
		if hardDone {
			return
		}
		hardDone = true
		log.Info("ending the box at once", "why", why)
		st.Control.Close() // the watcher sees EOF and kills everything
		st.Kill()
	}
	if l.o.Deadline > 0 {
		// The watcher keeps the deadline; this is the host's backstop
		// for a box that cannot.
		deadline = time.After(l.o.Deadline + l.o.Grace + 10*time.Second)
	}
	var o readResult
wait:
	for {
		select {
		case o = <-res:
			break wait
		case s := <-l.x.Signals:
			if n, ok := forwarded(s); ok {
				log.Info("forwarding signal to the agent", "signal", s)
				go w.Send(shared.FrameSignal, shared.Signal{Number: n}.Marshal())
				continue
			}
			signals++
			lastSig = s
			if signals == 1 {
				log.Info("signal: stopping the agent", "signal", s, "grace", l.o.Grace)
				// Off the loop: a stream that does not drain must not keep
				// the second signal from being handled.
				go func() {
					if err := w.Send(shared.FrameStop, shared.Stop{Grace: l.o.Grace}.Marshal()); err != nil {
						log.Debug("send stop", "err", err)
					}
				}()
				hard = time.After(l.o.Grace + 5*time.Second)
			} else {
				endNow("second signal " + s.String())
			}
		case <-l.ctrl.Lost():
			ctrlLost = true
			endNow(l.ctrl.Why())
		case <-hard:
			endNow("the box did not stop within grace")
		case <-deadline:
			if l.partyBusy(10 * time.Second) {
				// A copy is moving (copy-in precedes the watcher's deadline,
				// copy-out follows it): the box is not past due while it does.
				deadline = time.After(10 * time.Second)
				continue
			}
			pastDue = true
			endNow("the box outlived its deadline")
		}
	}

	if o.exit != nil {
		log.Info("exited", "reason", o.exit.Reason, "code", o.exit.Code, "runtime", o.exit.Runtime, "sweep", o.exit.Sweep)
	}
	end := streamEnd{exit: o.exit, ready: o.ready, err: o.err, signal: lastSig, endedNow: hardDone, pastDue: pastDue}
	switch {
	case ctrlLost:
		end.lost, end.lostWhy = shared.ReasonControllerLost, l.ctrl.Why()
	case o.outErr != nil:
		end.lost, end.lostWhy = shared.ReasonOutputLost, o.outErr.Error()
	}
	out := decide(end, l.o.Deadline, l.tail.Last())
	if en, ok := l.rt.(Ender); ok && o.exit == nil && o.ready {
		// The stream ended without the watcher's word (the engine died
		// under the box?): end the box now rather than at its heartbeat.
		left, err := en.End(l.box)
		if err != nil {
			l.say("the box may still run: ending it without the engine failed: %v", err)
		} else if left != "" {
			l.say("%s", left)
		}
	}
	for _, p := range l.o.Parties {
		if v := p.End(o.exit != nil && o.ready); v != nil {
			out = outcome{code: v.Code, eventReason: string(v.Reason), journalReason: string(v.Reason), say: v.Say}
		}
	}
	if out.say != "" {
		l.say("%s", out.say)
	}
	l.emit(Event{Event: EventExited, Code: ptr(out.code), Reason: out.eventReason})
	l.entry.Exit = &JournalExit{Code: out.code, Reason: out.journalReason}
	return out.code
}

// partyFrame hands a frame the lifecycle does not own to the party it
// belongs to; one that no party takes is a protocol error.
func (l *launch) partyFrame(f shared.Frame) error {
	for _, p := range l.o.Parties {
		if handled, err := p.Frame(f); handled {
			return err
		}
	}
	return &shared.ProtocolError{Reason: "unexpected " + f.Type.String() + " frame from the box"}
}

// partyBusy reports whether a party moved data within d.
func (l *launch) partyBusy(d time.Duration) bool {
	for _, p := range l.o.Parties {
		if p.Busy(d) {
			return true
		}
	}
	return false
}

// Reasons of an exit that the supervisor, not the watcher, decided (the
// watcher's are shared.Reason*). An exit event and its journal record
// take their reasons from these and from shared.Reason* alone.
const (
	// ReasonSignaled is the exited event's reason when a signal to the
	// supervisor ended a running box.
	ReasonSignaled = "signaled"
	// ReasonSupervisorSignaled is the journal's reason for the same, and
	// both reasons when the signal came before the box started.
	ReasonSupervisorSignaled = "supervisor-signaled"
)

// streamEnd is how attend's wait ended, as plain data.
type streamEnd struct {
	exit     *shared.Exit // the watcher's exit record, if one came
	ready    bool         // the agent started
	err      error        // the stream broke (nil: EOF or an exit record)
	signal   os.Signal    // the last signal that asked the box to stop
	endedNow bool         // the supervisor ended the box at once
	pastDue  bool         // the host's deadline backstop fired
	// lost is the controller's loss that ended the box (controller-lost
	// or output-lost, "" none), lostWhy how it was lost.
	lost    shared.Reason
	lostWhy string
}

// outcome is the supervisor's verdict on a box that ran.
type outcome struct {
	code          int
	eventReason   string
	journalReason string
	say           string // a line for stderr ("" none)
}

// decide turns how the stream ended into the exit status and reasons.
// Pure: deadline is --deadline, tail the box init's last stderr line.
func decide(e streamEnd, deadline time.Duration, tail string) outcome {
	signaled := func() outcome {
		return outcome{code: signalStatus(e.signal), eventReason: ReasonSignaled, journalReason: ReasonSupervisorSignaled}
	}
	same := func(code int, reason shared.Reason, say string) outcome {
		return outcome{code: code, eventReason: string(reason), journalReason: string(reason), say: say}
	}
	switch {
	case e.lost != "":
		// The controller is gone: whatever the box did after, this ended it.
		return same(shared.ExitControllerLost, e.lost, e.lostWhy+"; the box was ended")
	case e.signal != nil && e.endedNow && (e.exit == nil || e.exit.Reason == shared.ReasonLivenessLost || e.exit.Reason == shared.ReasonStopped):
		// We ended the box on a second signal: its liveness loss is ours,
		// and so is the stop the first signal asked for (the watcher
		// keeps that reason when the stream's end then kills the box).
		return signaled()
	case e.exit != nil:
		say := ""
		switch e.exit.Reason {
		case shared.ReasonDeadline:
			say = fmt.Sprintf("the deadline (%s) passed; the agent was stopped", deadline)
		case shared.ReasonLivenessLost, shared.ReasonSetupFailed, shared.ReasonVerifyFailed, shared.ReasonCopyRefused:
			say = e.exit.Message
			if say == "" {
				say = string(e.exit.Reason)
			}
		}
		return same(e.exit.Code, e.exit.Reason, say)
	case e.signal != nil:
		return signaled()
	case e.pastDue:
		return same(shared.ExitDeadline, shared.ReasonDeadline,
			fmt.Sprintf("the box outlived its deadline (%s) by more than grace + 10s; it was ended", deadline))
	case e.ready:
		why := "the control stream ended without an exit record"
		if e.err != nil {
			why = fmt.Sprintf("the control stream broke: %v", e.err)
		}
		return same(shared.ExitLivenessLost, shared.ReasonLivenessLost, why)
	default:
		why := "the box ended before the agent started"
		if e.err != nil {
			why += fmt.Sprintf(" (%v)", e.err)
		}
		if tail != "" {
			why += ": " + tail
		}
		return same(shared.ExitSetupFailed, shared.ReasonSetupFailed, why)
	}
}

// finish runs on every path once the intent is journaled: it lets go of
// the engine client, journals the removal intent, removes the box,
// journals the removal, and returns code.
func (l *launch) finish(code int, st *Started) int {
	if st != nil {
		st.Control.Close()
		waited := make(chan error, 1)
		go func() { waited <- st.Wait() }()
		select {
		case <-waited:
		case <-time.After(3 * time.Second):
			l.x.Log.Warn("engine client did not exit; killing its process group", "box", l.box.Name)
		}
		st.Kill()
		if cr, ok := st.Control.(interface{ CloseRead() error }); ok {
			cr.CloseRead()
		}
	}
	l.live.close()
	if err := l.journal(StateRemoving); err != nil {
		l.say("%v", err)
	}
	crashpoint(CrashRemoving)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	err := l.rt.Remove(ctx, l.box)
	if err != nil {
		l.entry.Error = err.Error()
		l.say("remove box %s: %v (the journal keeps it open for `supervisor reconcile`)", l.box.Name, err)
		if jerr := l.journal(StateRemoving); jerr != nil {
			l.say("%v", jerr)
		}
		l.emit(Event{Event: EventRemoved, Error: err.Error()})
		return code
	}
	l.live.remove()
	if err := l.journal(StateRemoved); err != nil {
		l.say("%v", err)
	}
	l.emit(Event{Event: EventRemoved})
	l.x.Log.Info("removed", "box", l.box.Name, "took", time.Since(t0))
	return code
}

func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return shared.SignalStatus(int(n))
	}
	return shared.SignalStatus(int(syscall.SIGTERM))
}

func ptr[T any](v T) *T { return &v }

// tailWriter forwards to w and remembers the last non-empty line. What
// it forwards is the box init's and the watcher's own stderr, from
// inside the box: every line goes out shared.Printable.
type tailWriter struct {
	mu   sync.Mutex
	w    io.Writer
	cur  []byte
	last string
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	for _, c := range p {
		if c == '\n' {
			if s := strings.TrimSpace(string(t.cur)); s != "" {
				t.last = s
			}
			t.cur = t.cur[:0]
			continue
		}
		if len(t.cur) < 4096 {
			t.cur = append(t.cur, c)
		}
	}
	t.mu.Unlock()
	if t.w == nil {
		return len(p), nil
	}
	parts := strings.Split(string(p), "\n")
	for i, part := range parts {
		parts[i] = shared.Printable(part)
	}
	if _, err := io.WriteString(t.w, strings.Join(parts, "\n")); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Last is the last complete (or pending) non-empty line.
func (t *tailWriter) Last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := strings.TrimSpace(string(t.cur)); s != "" {
		return s
	}
	return t.last
}
