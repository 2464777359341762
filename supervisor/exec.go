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
// IntentFinds: docker, podman) the intent is staged (written and synced
// under a name that is no entry) beside the probe and image check when
// the runtime is named, and committed once the launch is accepted: the
// box is created only once the intent is durable, and a launch refused
// before anything exists journals nothing. The created and started
// states are written and synced before the step that follows each.
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
	"context"
	"deathwatch/supervisor/journal"
	"errors"
	"fmt"
	"os"
	"time"

	"deathwatch/shared"
	"deathwatch/shared/seccomp"
	"deathwatch/supervisor/controller"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/internal/controllerwatch"
	"deathwatch/supervisor/internal/crashpoint"
	"deathwatch/supervisor/internal/launchid"
	"deathwatch/supervisor/internal/netpolicy"
	"deathwatch/supervisor/internal/survival"
)

// Exec runs one box end to end: the library form of `supervisor exec`,
// with the same events, journal entry and exit record. The runtimes a
// caller wants must be registered: import their packages
// (supervisor/runtime/docker, .../native), as supervisor/cli/runtimes.go
// does; a program that runs the native runtime calls Init first in main.
//
// The zero ExecOptions but Argv is a valid request (WithDefaults). Exec
// writes nothing of its own: its lines for a person go to IO.Say, and
// the cause that ended the launch, when the supervisor has one (a
// refusal, a setup that failed, the deadline, a lost controller, an OOM
// kill), is its error, an *ExitError whose Code is Result.Code. An agent
// that exited or was signalled on its own is a nil error and its status
// in Result.Code.
func Exec(ctx context.Context, o ExecOptions) (Result, error) {
	o = o.WithDefaults()
	x := &o.IO
	fail := func(err error, def int) (Result, error) {
		code := exitcode.Of(err, def)
		return Result{Code: code}, exitcode.With(code, err)
	}
	if x.Controller == nil {
		w, err := controllerwatch.Take(o.Controller)
		if err != nil {
			return fail(err, shared.ExitUsage)
		}
		defer w.Close()
		x.Controller = w
	}
	if x.Controller != nil && x.Controller.Link == controller.LinkDetached {
		x.say("warning: --detach: the controller is not watched; its death leaves this box running until the heartbeat (%v) or the deadline (%v) ends it", o.Heartbeat, o.Deadline)
	}
	if w := (survival.Limits{Heartbeat: o.Heartbeat, Deadline: o.Deadline, Grace: o.Grace}).Warning(); w != "" {
		x.say("%s", w)
	}
	spec, err := validate(&o)
	if err != nil {
		return fail(err, shared.ExitUsage)
	}
	l, err := newLaunch(&o, spec)
	if err != nil {
		return fail(err, shared.ExitSetupFailed)
	}
	if d, _ := Lookup(o.Runtime); d.Has(CapIntentFinds) {
		// The runtime is named and its intent needs nothing the probe
		// finds: the intent is staged (written and synced under a name
		// that is no entry) beside the probe and the image check, and
		// run commits it before anything is created. A launch refused
		// before run drops it: nothing was created, nothing journaled.
		l.stageIntent()
		defer l.dropIntent()
	}
	cfg := RuntimeConfig{Log: x.Log, Stderr: l.tail, EngineEnv: x.EngineEnv, ProveBind: quietProof(defaultProof(ctx, o))}
	p, err := pickRuntime(ctx, &o, cfg)
	if err != nil {
		return fail(err, shared.ExitEngine)
	}
	rt, info := p.rt, p.info
	d, _ := Lookup(rt.Name())
	if err := checkInit(d); err != nil {
		return fail(err, shared.ExitUsage)
	}
	l.rt, l.oneStep, l.entry.Runtime = rt, p.oneStep, rt.Name()
	l.hooks, _ = rt.(LaunchHooks)
	x.Log.Info("runtime", "name", rt.Name(), "version", info.Version, "rootless", info.Rootless)
	if p.chosen != "" {
		l.say("%s", p.chosen)
	}
	if err := l.admit(ctx, d); err != nil {
		return fail(err, shared.ExitRefused)
	}
	code := l.run(ctx)
	l.result.Code = code
	if l.err != nil {
		return l.result, exitcode.With(code, l.err)
	}
	return l.result, nil
}

// newLaunch is the launch of o once its spec is worked out: its box's
// identity, the journal and the entry it is to write.
func newLaunch(o *ExecOptions, spec shared.Spec) (*launch, error) {
	owner, err := journal.SelfOwner()
	if err != nil {
		return nil, exitcode.Setup("%w", err)
	}
	j, err := journal.Open(o.JournalDir, o.Instance, Volatile)
	if err != nil {
		return nil, exitcode.With(exitcode.Of(err, shared.ExitSetupFailed), err)
	}
	x := &o.IO
	box := newBox(o)
	return &launch{
		o: o, x: x, box: box, j: j, spec: spec, tail: &tailWriter{w: x.Stderr},
		entry: &journal.Entry{
			LaunchID: box.LaunchID, Instance: o.Instance, RunKey: o.RunKey, Box: box.Name,
			Runtime: o.Runtime, Image: o.Image, Nonce: box.Nonce, Labels: box.Labels, Owner: owner,
			Controller: controllerRecord(x.Controller, owner), State: journal.StateIntent, Created: time.Now().UTC(),
		},
		ctrl: x.Controller,
	}, nil
}

// say hands one line to Say, if set; what a box chose in it (a file
// name, the watcher's message) cannot reach the controller's terminal
// as a control sequence (shared.Printable).
func (x *ExecIO) say(format string, args ...any) {
	if x.Say != nil {
		x.Say(shared.Printable(fmt.Sprintf(format, args...)))
	}
}

// admit refuses, once the runtime is known and before anything is
// journaled or created, what it cannot honour: a host port, a limit or
// a mount it cannot keep, what its Preparer refuses; Prepare may name
// the box and ask for mount-bridge links. The write limits go into the
// spec last. The error carries its exit status.
func (l *launch) admit(ctx context.Context, d Descriptor) error {
	if len(l.o.HostPorts) > 0 && !d.Has(CapHostPorts) {
		return exitcode.Refused("--host-port: runtime %s cannot scope a box's reach to one host port; drop --host-port or use a runtime that can", l.rt.Name())
	}
	if a, ok := l.rt.(Admitter); ok {
		if err := a.Admit(ctx, l.box); err != nil {
			return exitcode.With(exitcode.Of(err, shared.ExitRefused), err)
		}
	}
	if p, ok := l.rt.(Preparer); ok {
		if err := p.Prepare(ctx, l.box); err != nil {
			return exitcode.With(exitcode.Of(err, shared.ExitRefused), err)
		}
		l.entry.Box = l.box.Name // the runtime may name the box
		// An intent staged beside the probe named the box as it was:
		// run writes it again, as it stands now.
		l.stale = true
		if len(l.box.Links) > 0 {
			l.spec.Links = append(l.spec.Links, l.box.Links...)
			if err := l.spec.Validate(); err != nil {
				return exitcode.Usage("%w", err)
			}
		}
	}
	if err := l.limitWrites(); err != nil {
		return exitcode.With(exitcode.Of(err, shared.ExitUsage), err)
	}
	return nil
}

// validate works out the spec the options and their parties ask for,
// and refuses impossible or unsafe combinations before anything exists
// (the error carries its exit status). It fills in the watcher a
// runtime's boxes must run.
func validate(o *ExecOptions) (shared.Spec, error) {
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
		return spec, exitcode.Usage("%w", err)
	}
	for _, p := range o.Parties {
		if err := p.Check(); err != nil {
			return spec, exitcode.With(exitcode.Of(err, shared.ExitUsage), err)
		}
	}
	if o.Network == "host" && !o.AllowHostNetwork {
		return spec, exitcode.Refused("%s", netpolicy.HostRefusal)
	}
	if err := spec.Validate(); err != nil {
		if refused := (*shared.RefusedError)(nil); errors.As(err, &refused) {
			return spec, exitcode.Refused("--user %d:%d: %v", o.UID, o.GID, refused.Why)
		}
		var root *shared.RootRefusedError
		if errors.As(err, &root) {
			return spec, exitcode.Refused("--user %d:%d: the agent never runs as root (uid or gid 0); pick another UID:GID", o.UID, o.GID)
		}
		return spec, exitcode.Usage("%w", err)
	}
	d, _ := Lookup(o.Runtime)
	if d.ImageWatcher != "" {
		// The box cannot take the host's watcher: the image's it is.
		if o.WatcherInImage == "" {
			o.WatcherInImage = d.ImageWatcher
		}
		o.WatcherPath = ""
	}
	if !d.Has(CapHostWatcherOnly) && o.WatcherInImage == "" && o.WatcherPath == "" {
		return spec, exitcode.Usage("no watcher binary: put `watcher` next to the supervisor or on PATH, or pass --watcher PATH or --watcher-in-image PATH")
	}
	return spec, nil
}

// newBox is the launch's identity: a fresh launch id and nonce, the
// box's name and labels, and what the options ask of it.
func newBox(o *ExecOptions) *Box {
	launchID := launchid.New()
	nonce := launchid.Hex(16)
	prefix := o.NamePrefix
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

// launch is one box's lifecycle once its identity is fixed.
type launch struct {
	o       *ExecOptions
	x       *ExecIO
	rt      Runtime
	oneStep OneStepStarter // rt, whose CreateStart creates and starts the box; nil otherwise
	box     *Box
	j       *journal.Journal
	entry   *journal.Entry
	spec    shared.Spec
	tail    *tailWriter
	ctx     context.Context
	// staged is the intent being staged beside the probe (Exec), until
	// run commits it or dropIntent removes it; stale: Prepare changed
	// the box after it was staged.
	staged chan stagedIntent
	stale  bool
	// hooks is the runtime's part in the launch, nil for none.
	hooks LaunchHooks
	// ctrl is the link to the controller (nil: none); its loss ends
	// the box.
	ctrl *controller.Watch
	// result is what Exec returns, err the cause that ended the launch
	// (nil: the agent's own end).
	result Result
	err    error
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
	l.failed(fmt.Errorf("%s; the box was ended", l.ctrl.Why()))
	if st != nil {
		st.Control.Close()
		st.Kill()
	}
	return l.early(shared.ExitControllerLost, string(shared.ReasonControllerLost), st)
}

func (l *launch) emit(ev Event) {
	ev.V, ev.Instance, ev.LaunchID, ev.Box, ev.Runtime = EventsVersion, l.o.Instance, l.box.LaunchID, l.box.Name, l.rt.Name()
	ev.Time = time.Now().UTC()
	l.result.record(ev)
	l.x.Events.Emit(ev)
	if l.x.OnEvent != nil {
		l.x.OnEvent(ev)
	}
}

// say hands one line of the supervisor's own to Say.
func (l *launch) say(format string, args ...any) { l.x.say(format, args...) }

// failed keeps err as the cause that ends the launch (the first one).
func (l *launch) failed(err error) {
	if l.err == nil {
		l.err = err
	}
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

func (l *launch) run(ctx context.Context) int {
	log := l.x.Log.With("box", l.box.Name, "launch", l.box.LaunchID)
	var err error
	if l.staged != nil && !l.stale {
		err = l.commitIntent() // staged beside the probe (Exec)
	} else {
		l.dropIntent()
		err = l.journal(journal.StateIntent)
	}
	if err != nil {
		l.failed(fmt.Errorf("%w (nothing was created)", err))
		return shared.ExitSetupFailed
	}
	l.emit(Event{Event: EventJournaled})
	log.Info("journaled", "dir", l.j.Dir())
	crashpoint.At(crashpoint.AfterJournal)

	if l.controllerLost() {
		return l.lost(nil)
	}
	if s := l.pendingSignal(); s != nil {
		return l.early(signalStatus(s), ReasonSupervisorSignaled, nil)
	}
	if l.hooks != nil {
		l.hooks.Arm(ctx, l.box, &l.spec)
	}
	// A one-step runtime's client creates and starts the box; created
	// says when the box exists. Its intent is durable before the client
	// starts, so that reconcile can prove the box ours whatever the
	// journal says when the supervisor dies.
	var st *Started
	create := func() error { return l.rt.Create(ctx, l.box) }
	if l.oneStep != nil {
		s, created, err := l.oneStep.CreateStart(ctx, l.box)
		if err != nil {
			l.failed(err)
			return l.early(exitcode.Of(err, shared.ExitSetupFailed), string(shared.ReasonSetupFailed), nil)
		}
		st, create = s, created
		crashpoint.At(crashpoint.InRun)
	}
	if err := create(); err != nil {
		l.failed(err)
		return l.early(exitcode.Of(err, shared.ExitSetupFailed), string(shared.ReasonSetupFailed), st)
	}
	if ids := l.box.OwnIDs; ids != nil {
		l.spec.UID, l.spec.GID = ids.AgentUID, ids.AgentGID
	}
	if err := l.journal(journal.StateCreated); err != nil {
		l.failed(err)
		return l.early(shared.ExitSetupFailed, string(shared.ReasonSetupFailed), st)
	}
	l.emit(Event{Event: EventCreated})
	log.Info("created")
	if l.box.Network == "bridge" {
		l.say("%s", netpolicy.BridgeWarning)
	}
	l.crashAt(crashpoint.AfterCreate)
	if l.controllerLost() {
		return l.lost(st)
	}
	if s := l.pendingSignal(); s != nil {
		return l.early(signalStatus(s), ReasonSupervisorSignaled, st)
	}
	l.ctx = ctx
	pl := &PartyLaunch{Box: l.box, Runtime: l.rt, OneStep: l.oneStep != nil, Log: l.x.Log, Say: l.say, Emit: l.emit}
	for _, p := range l.o.Parties {
		p.Created(ctx, pl, &l.spec)
	}

	if st == nil {
		var err error
		if st, err = l.rt.Start(ctx, l.box); err != nil {
			l.failed(err)
			return l.early(exitcode.Of(err, shared.ExitSetupFailed), string(shared.ReasonSetupFailed), nil)
		}
	}
	if err := l.journal(journal.StateStarted); err != nil {
		l.failed(err)
		st.Control.Close()
		st.Kill()
		return l.early(shared.ExitSetupFailed, string(shared.ReasonSetupFailed), st)
	}
	l.emit(Event{Event: EventStarted})
	log.Info("started")
	l.crashAt(crashpoint.AfterStart)
	return l.finish(l.attend(st, log), st)
}

// early ends a launch that failed or was interrupted before the
// control stream took over: the exit is journaled and announced like
// any other, then the box is removed.
func (l *launch) early(code int, reason string, st *Started) int {
	l.entry.Exit = &journal.Exit{Code: code, Reason: reason}
	l.emit(Event{Event: EventExited, Code: ptr(code), Reason: reason})
	return l.finish(code, st)
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
	if l.hooks != nil {
		l.hooks.Release(l.box)
	}
	if err := l.journal(journal.StateRemoving); err != nil {
		l.say("%v", err)
	}
	crashpoint.At(crashpoint.Removing)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	err := l.rt.Remove(ctx, l.box)
	if err != nil {
		l.entry.Error = err.Error()
		l.say("remove box %s: %v (the journal keeps it open for `supervisor reconcile`)", l.box.Name, err)
		if jerr := l.journal(journal.StateRemoving); jerr != nil {
			l.say("%v", jerr)
		}
		l.emit(Event{Event: EventRemoved, Error: err.Error()})
		return code
	}
	if err := l.journal(journal.StateRemoved); err != nil {
		l.say("%v", err)
	}
	l.emit(Event{Event: EventRemoved})
	l.x.Log.Info("removed", "box", l.box.Name, "took", time.Since(t0))
	return code
}

func ptr[T any](v T) *T { return &v }

// quietProof is prove with the crash points of the nested launch it
// runs kept quiet (crashpoint.Quiet); nil stays nil.
func quietProof(prove BindProver) BindProver {
	if prove == nil {
		return nil
	}
	return func(ctx context.Context, runtime, dir string) (bool, string) {
		crashpoint.Quiet.Add(1)
		defer crashpoint.Quiet.Add(-1)
		return prove(ctx, runtime, dir)
	}
}
