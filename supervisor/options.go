package supervisor

// Options of `supervisor exec` and their defaults, worked out as plain data.

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor/controller"
	"deathwatch/supervisor/journal"
)

// ExecOptions is `supervisor exec` worked out as plain data. It holds
// the agent's environment (AgentEnv) only to put it into the spec frame.
// Its zero value is a valid request: every zero field takes the default
// WithDefaults names (the CLI's flags show the same defaults), so a
// caller sets Argv and what it wants otherwise.
type ExecOptions struct {
	Instance   string // "": DefaultInstance
	JournalDir string // "": journal.DefaultDir()
	Runtime    string // a registered runtime's name, or auto ("")
	Image      string
	NamePrefix string            // "": DefaultNamePrefix
	Labels     map[string]string // the user's --label (never io.deathwatch.*)
	RunKey     string
	AgentEnv   []string // NAME=value, for the spec frame only: secrets
	Workdir    string
	Mounts     []Mount
	MountOwner *HostIDs // --mount-owner (Box.MountOwner)
	Memory     int64
	PidsLimit  int64
	Network    string        // none (""), bridge or host
	NetworkSet bool          // Network was given explicitly
	HostPorts  []int         // host loopback ports the box may reach (runtimes with Descriptor.HostPorts)
	Deadline   time.Duration // 0: DefaultDeadline; Disabled: none
	Grace      time.Duration // 0: DefaultGrace; Disabled: none
	Heartbeat  time.Duration // 0: DefaultHeartbeat; Disabled: none

	AllowRootful   bool
	AllowUserns    bool   // the agent may make nested user namespaces
	WatcherPath    string // host watcher to bind-mount ("": FindWatcher's)
	WatcherInImage string // watcher baked into the image
	// UID and GID are the agent's ids; both 0 take DefaultUser (root is
	// never the agent: one of them 0 is refused).
	UID, GID uint32
	Argv     []string

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

	// IO is what the launch talks to (zero: no output, no input).
	IO ExecIO
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
	// of each side every few seconds (make bench prints the CPU) and
	// survives a GC pause, a short SIGSTOP or a loaded host without a
	// false kill.
	DefaultHeartbeat = 10 * time.Second
	// DefaultDeadline is the in-box deadline: GitLab CI's default job
	// timeout, long enough for a build or an agent's turn, short enough
	// that a box whose watch failed ends the same working hour.
	DefaultDeadline = time.Hour
	// DefaultGrace is exec's TERM-to-KILL grace (the CLI's --grace).
	DefaultGrace = 2 * time.Second
	// Disabled, as ExecOptions.Heartbeat, Deadline or Grace, turns that
	// bound off (0 takes the default).
	Disabled time.Duration = -1
)

// The defaults of the options that are not bounds; the CLI's flags
// take theirs from these.
const (
	DefaultInstance   = "default"
	DefaultNamePrefix = "dw"
	DefaultNetwork    = "none"
)

// DefaultUser is the agent's UID:GID when the options name none.
var DefaultUser = fmt.Sprintf("%d:%d", shared.DefaultAgentUID, shared.DefaultAgentGID)

// WithDefaults is o with every zero field's default filled in: the
// bounds (a zero Heartbeat, Deadline or Grace takes its Default*,
// Disabled turns it off: 0 in the spec), the instance, journal, name
// prefix, network and agent ids, and writers that discard.
func (o ExecOptions) WithDefaults() ExecOptions {
	o.Heartbeat = withDefault(o.Heartbeat, DefaultHeartbeat)
	o.Deadline = withDefault(o.Deadline, DefaultDeadline)
	o.Grace = withDefault(o.Grace, DefaultGrace)
	if o.Instance == "" {
		o.Instance = DefaultInstance
	}
	if o.JournalDir == "" {
		o.JournalDir = journal.DefaultDir()
	}
	if o.NamePrefix == "" {
		o.NamePrefix = DefaultNamePrefix
	}
	if o.Network == "" {
		o.Network = DefaultNetwork
	}
	if o.UID == 0 && o.GID == 0 {
		o.UID, o.GID = shared.DefaultAgentUID, shared.DefaultAgentGID
	}
	if o.IO.Stdout == nil {
		o.IO.Stdout = io.Discard
	}
	if o.IO.Stderr == nil {
		o.IO.Stderr = io.Discard
	}
	if o.IO.Log == nil {
		o.IO.Log = slog.New(slog.DiscardHandler)
	}
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

// ExecIO is what exec talks to. Tests fill it with buffers and a
// signal channel they control.
type ExecIO struct {
	// Stdout and Stderr receive the agent's output and the box init's
	// own stderr (nil: discarded).
	Stdout, Stderr io.Writer
	Log            *slog.Logger
	// Say receives each line the supervisor has for a person while the
	// box lives (a warning, the runtime auto chose, a removal that
	// failed), without a prefix; nil: none. What ends a launch is
	// Exec's error, never a Say line.
	Say    func(line string)
	Events *Events // --events: line-delimited JSON (nil: none)
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
	// ProveBind runs a bind proof for the runtime (RuntimeConfig);
	// nil: ProveBind with this launch's options.
	ProveBind BindProver
	// Controller is a link to the controller already taken
	// (controllerwatch.Take): the CLI takes it before anything else. nil:
	// Exec takes ExecOptions.Controller's.
	Controller *controller.Watch
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
