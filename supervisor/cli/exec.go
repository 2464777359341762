package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	boxcopy "deathwatch/supervisor/copy"
	"deathwatch/supervisor/internal/controllerwatch"
)

// ExecCmd is `supervisor exec`.
type ExecCmd struct {
	Runtime           string        `help:"Runtime that makes the box: ${runtimes_list}, or auto (${auto_help})." enum:"${runtimes},auto" default:"auto" env:"DEATHWATCH_RUNTIME"`
	Image             string        `help:"Image to run (docker/podman: never pulled; native: rootfs directory; sbx: the template)." env:"DEATHWATCH_IMAGE"`
	Template          string        `help:"sbx: the template the sandbox is made from (sbx template load); --image says the same." placeholder:"TEMPLATE"`
	HostPort          []int         `help:"Let the box reach this port of the host's loopback, and nothing more of the host (repeatable; sbx: one sandbox-scoped policy rule each)." sep:"none" placeholder:"PORT"`
	Name              string        `help:"Prefix of the box name; the launch id follows it." default:"${default_name}" placeholder:"PREFIX"`
	Label             []string      `help:"Extra label KEY=VALUE on the box (repeatable; io.deathwatch.* is reserved)." sep:"none" placeholder:"KEY=VALUE"`
	RunKey            string        `help:"The controller's run this box belongs to (a label, and in the journal)."`
	Env               []string      `help:"Pass NAME to the agent, its value taken from the supervisor's environment (repeatable). Values travel only inside the control stream." sep:"none" placeholder:"NAME"`
	EnvFile           []string      `help:"Read NAME=VALUE lines for the agent from FILE (repeatable; # comments)." sep:"none" placeholder:"FILE"`
	Workdir           string        `help:"Working directory of the agent (absolute)." placeholder:"DIR"`
	Mount             []string      `help:"Bind mount SRC:DST[:ro] (repeatable; absolute paths)." sep:"none" placeholder:"SRC:DST[:ro]"`
	MountOwner        string        `help:"Native as root: the host account (never root) whose --mount folders the agent may own; what the agent writes there lands as UID:GID's. Any other folder is read-only to the agent, its files shown as nobody." placeholder:"UID:GID"`
	Memory            string        `help:"Memory limit, e.g. 512m or 2g (no swap beyond it; default 4g where the runtime can enforce it)." placeholder:"SIZE"`
	PidsLimit         int64         `help:"Maximum number of processes in the box (default 4096 where the runtime can enforce it)." placeholder:"N"`
	ReadWriteRoot     bool          `help:"Make the box's root file system writable (docker, podman: the engine's writable layer, unbounded on the host's disk). By default it is read-only; /tmp and /dev/shm are bounded tmpfs, and the agent writes only there, in its read-write --mount folders and devices (Landlock, ABI 3, Linux 6.2)."`
	RequireLandlock   bool          `help:"Refuse (243) to start the agent on a kernel (the box's: a microVM's own) without Landlock's write limits and scopes (ABI 6, Linux 6.12). Without it such a kernel loses that layer: one line says so when it is the write limits."`
	Network           string        `help:"Network: none (the default), bridge or host. host is refused without --allow-host-network." placeholder:"none|bridge|host"`
	AllowHostNet      bool          `name:"allow-host-network" help:"Accept --network host: the agent then shares the host's network namespace, so it can connect to every port on its loopback, and on a kernel without Landlock ABI 6 to every abstract unix socket of the host (X11, D-Bus, containerd, systemd). On a rootless engine, host is the engine's own namespace (rootless Docker: rootlesskit's; rootless Podman: the host's, as its user)."`
	Deadline          time.Duration `help:"Stop the agent this long after it started; exit status 246. 0 turns the deadline off (a warning says what that leaves)." default:"${default_deadline}"`
	Grace             time.Duration `help:"TERM-to-KILL grace for the deadline, for stop on SIGINT/SIGTERM and for the final sweep." default:"${default_grace}"`
	Heartbeat         time.Duration `help:"The watcher kills the box when the supervisor is silent this long (a frozen supervisor); pings go every third of it. 0: only the stream's end counts (a warning says what that leaves)." default:"${default_heartbeat}"`
	Events            string        `help:"Write line-delimited JSON lifecycle events (journaled, created, started, ready, exited, removed) to FILE or fd:N; a FILE is truncated first (see --events-append). Each line carries \"v\": 1, its schema's version (docs/schemas/events.v1.json)." placeholder:"FILE|fd:N"`
	EventsAppend      bool          `help:"Append to the --events FILE instead of truncating it."`
	AllowRootful      bool          `help:"Accept a rootful engine (a box escape is root on the host)."`
	AllowUserns       bool          `help:"Let the agent make nested user namespaces (and mount inside them): the syscall filter refuses them otherwise, as most local-root exploits start there."`
	Watcher           string        `help:"Host watcher binary to bind-mount read-only as the box's entrypoint (default: watcher next to the supervisor, then PATH)." placeholder:"PATH"`
	WatcherInImage    string        `help:"Use the watcher baked into the image at PATH instead of bind-mounting one." placeholder:"PATH"`
	User              string        `help:"UID:GID the agent runs as (0 is refused)." default:"${default_user}" placeholder:"UID:GID"`
	TTY               bool          `name:"tty" short:"t" help:"Run the agent on a pseudo-terminal in the box, fed by the supervisor's stdin; a terminal there goes to raw mode for the session (always restored) and its window size follows."`
	Stdin             bool          `short:"i" help:"Relay the supervisor's stdin to the agent's stdin; its end closes the agent's stdin while the box stays watched."`
	CopyIn            []string      `help:"Copy the host file or tree HOSTPATH to BOXPATH before the agent starts, owned by the agent, through the engine's archive endpoint where its API is reached (Docker) and over the control stream elsewhere; the watcher verifies it before the agent runs (repeatable; no host path is mounted)." sep:"none" placeholder:"HOSTPATH:BOXPATH"`
	CopyOut           []string      `help:"After the agent (also after a deadline or a failure), copy BOXPATH back to HOSTDIR/NAME with its manifest as HOSTDIR/NAME.manifest; never overwrites, never makes a symlink that leaves the tree (repeatable)." sep:"none" placeholder:"BOXPATH:HOSTDIR"`
	CopyOutLimit      string        `help:"Refuse (exit 248, nothing kept) a copy-out tree whose files add up to more than SIZE." default:"1g" placeholder:"SIZE"`
	CopyOutMaxEntries int64         `help:"Refuse (exit 248, nothing kept) a copy-out tree of more than N entries (folders, files, links): the host keeps each entry's path while the tree arrives." default:"1000000" placeholder:"N"`
	ControllerFD      int           `help:"Die with the controller through descriptor N instead of the parent process: a pipe or socket whose other end only the controller holds; its EOF (the controller's death) ends the box (exit 249). For controllers that start the supervisor through a shell, sudo or a process pool." default:"-1" placeholder:"N"`
	ControllerPID     string        `help:"Die with process PID instead of the parent process; :START, its start time (clock ticks since boot, /proc/PID/stat field 22), makes sure a reused pid is never taken for it." placeholder:"PID[:START]"`
	Detach            bool          `help:"Watch no controller: the box outlives the process that started it (a warning says so); only --heartbeat and --deadline bound it, and a later reconcile of the instance ends it once that process is gone."`
	Stage             string        `help:"How --copy-in reaches the box: copy (stream it), bind (a read-only bind mount; refused unless a nonce file proves this runtime shares the folder), auto (bind where proven, copy elsewhere)." enum:"copy,bind,auto" default:"copy"`

	Kube KubeExec `embed:"" prefix:"kube-"`

	Command []string `arg:"" name:"cmd" passthrough:"partial" help:"The agent command and its arguments (after --)." placeholder:"CMD ARGS"`
}

// Help is the long help of exec.
func (ExecCmd) Help() string {
	var b strings.Builder
	b.WriteString(`Runs CMD as the agent of a fresh box whose PID 1 is the watcher, relays its output,
and exits with its status. The box is removed on every path; if the supervisor is
killed, the watcher sees its control stream end and kills the box.

Bounds by default: --heartbeat 10s (a frozen supervisor's box dies within about
10s) and --deadline 1h (a box whose watch failed still ends at 1h + --grace).
--heartbeat 0 and --deadline 0 turn them off, with a warning.

Signals: the first SIGINT, SIGTERM or SIGHUP stops the agent (TERM, --grace,
KILL); a second one ends the box at once. SIGUSR1 and SIGUSR2 go to the agent.
Under --tty the terminal is raw: ^C is a byte for the agent, not a signal.

The controller: the supervisor dies with the process that started it (its parent,
watched as a process: a pidfd on Linux), and ends the box as on a SIGKILL, in order:
exit 249, reason controller-lost. --controller-fd N or --controller-pid PID name
another controller; --detach watches none. A parent already gone at start is
refused (249) before anything is created. A failed write of the agent's output to
the supervisor's stdout or stderr (EPIPE: the reader is gone) ends the box too:
exit 249, reason output-lost.

Input: without --stdin or --tty the agent's stdin is /dev/null and the
supervisor's stdin is never read. --stdin relays it (at most 256 KiB
in flight: a slow agent slows the writer, never the box's liveness).

Flags come first; the agent command and its arguments follow --.

Example:
  supervisor exec --runtime docker --allow-rootful --image IMAGE --env TOKEN -- sh -c 'echo hi'

Exit status:
`)
	for _, r := range shared.ExitTable {
		fmt.Fprintf(&b, "  %-6s %s\n", r.Code, r.Meaning)
	}
	return b.String()
}

// Run is `supervisor exec`.
func (e *ExecCmd) Run(g *Globals, c *cmdContext) error {
	o, err := e.options(g, c)
	if err != nil {
		return err
	}
	// The controller's handle first: a parent that is already gone gets
	// no box, and no probe box either.
	ctrl, err := controllerwatch.Take(o.Controller)
	if err != nil {
		return err
	}
	defer ctrl.Close()
	ev, err := supervisor.OpenEvents(e.Events, e.EventsAppend)
	if err != nil {
		return err
	}
	defer ev.Close()
	sigs := c.signals
	if sigs == nil && c.execSignals != nil {
		sigs = c.execSignals()
	}
	if sigs == nil {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, execSignals...)
		defer signal.Stop(ch)
		// A closed stdout must not kill the supervisor before it
		// removes the box: take SIGPIPE as an error return instead.
		if len(ignoredSignals) > 0 {
			pipe := make(chan os.Signal, 1)
			signal.Notify(pipe, ignoredSignals...)
			defer signal.Stop(pipe)
		}
		sigs = ch
	}
	env := e.Kube.engineEnv(c.env, e.Deadline, e.Grace)
	if env == nil {
		env = os.Environ()
	}
	if err := e.stage(context.Background(), g, c, o, copies(o), env); err != nil {
		return err
	}
	in, err := e.input(c, o)
	if err != nil {
		return err
	}
	defer in.close()
	stderr := c.stderr
	if in.raw {
		stderr = crlf{stderr}
	}
	o.IO = supervisor.ExecIO{
		Stdout: c.stdout, Stderr: stderr, Log: g.logger(stderr), Events: ev, Signals: sigs,
		EngineEnv: engineEnv(env, e.Env), Stdin: in.stdin, Resize: in.resize, Controller: ctrl,
		Say: g.sayer(stderr),
	}
	res, err := supervisor.Exec(context.Background(), *o)
	c.code = res.Code
	return err
}

// copies is the copy party of o (options puts one in).
func copies(o *supervisor.ExecOptions) *boxcopy.Copies {
	for _, p := range o.Parties {
		if cp, ok := p.(*boxcopy.Copies); ok {
			return cp
		}
	}
	return boxcopy.New(boxcopy.Options{})
}

// hostWatcherOnly: the runtime puts the host's watcher into the box
// itself and reports a missing one when it creates the box.
func hostWatcherOnly(runtime string) bool {
	d, _ := supervisor.Lookup(runtime)
	return d.Has(supervisor.CapHostWatcherOnly)
}

// engineEnv is the environment for engine CLIs: the supervisor's own
// without the variables passed to the agent, so that their values sit
// in no process's environment but the supervisor's and the agent's.
func engineEnv(env, agentNames []string) []string {
	drop := map[string]bool{}
	for _, n := range agentNames {
		drop[n] = true
	}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !drop[name] {
			out = append(out, kv)
		}
	}
	return out
}

// hostGroupFile is where powerGroup looks (a fake in tests).
var hostGroupFile = "/etc/group"

// powerGroups are host groups whose gid alone grants power over the host.
var powerGroups = []string{"root", "docker", "podman", "disk", "kvm", "sudo", "wheel", "admin", "adm", "shadow", "systemd-journal", "lxd", "libvirt", "incus-admin"}

// powerGroup names the host group in file whose gid is gid when it is one
// of powerGroups, else "".
func powerGroup(gid uint32, file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 || f[2] != strconv.FormatUint(uint64(gid), 10) {
			continue
		}
		for _, g := range powerGroups {
			if f[0] == g {
				return g
			}
		}
	}
	return ""
}

// takeExecSignals starts taking exec's signals (execSignals, and
// ignoredSignals as error returns) on a goroutine of its own, and
// returns the function that waits for it and gives their channel. The
// runtime enables each signal with a round trip to its signal thread:
// begun in Main, those overlap the parse of the command line, and exec
// waits for them before anything can be created. They are never
// stopped: the process ends with exec.
func takeExecSignals() func() <-chan os.Signal {
	ch := make(chan os.Signal, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		signal.Notify(ch, execSignals...)
		if len(ignoredSignals) > 0 {
			signal.Notify(make(chan os.Signal, 1), ignoredSignals...)
		}
	}()
	return func() <-chan os.Signal {
		<-done
		return ch
	}
}
