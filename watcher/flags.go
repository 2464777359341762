// Package watcher is the PID-1 death-watch: it starts the agent under
// another identity, reaps, forwards signals, and kills every process of
// the box when the control stream from the host reaches EOF, goes
// silent or breaks, and when the in-box deadline passes.
//
// It stays small: no reflection-heavy encoding, no networking, no
// os/exec. A test fences its imports.
package watcher

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"deathwatch/shared"
)

// Config is what the command line asks for.
type Config struct {
	Control   string // "", "stdin", "fd" (fd:N) or "unix" (unix:PATH)
	ControlFD int    // N for fd:N
	// ControlPath is the socket of unix:PATH (unixcontrol.go).
	ControlPath string
	// Nonce is the box's launch nonce, which the host's hello must
	// carry (unix control mode); "" checks none.
	Nonce    string
	Argv     []string
	Deadline time.Duration
	Grace    time.Duration
	// SpecTimeout: control mode's wait for the host's hello and spec.
	SpecTimeout time.Duration
	User        *ID // plain mode: the agent's identity; nil keeps the caller's
	WatcherUser ID
	AllowRoot   bool
	// ParentFD is the read end of a pipe whose write end the outer
	// watcher holds (see domain.go); 0 when the watcher was not re-run.
	ParentFD int
	// AgentCgroupFD is a v1 memory cgroup's "tasks" file, opened by the
	// host: the agent is forked from a thread that joined it (see
	// joinThreadCgroup); 0 when there is none.
	AgentCgroupFD int
	// WatcherCgroupFD is a v2 cgroup's "cgroup.procs" file, opened by
	// the host: the watcher moves itself there once it has forked the
	// agent, which stays in the cgroup they shared (see
	// spawnHeld); 0 when there is none.
	WatcherCgroupFD int
	// LiveFD is the read end of the native runtime's live pipe (see
	// livefifo.go); 0 when there is none.
	LiveFD int
	// Restricted runs the agent at the watcher's own uid behind the
	// walls that stand in for another uid (restricted.go): for a box
	// that may hold no capability, such as a pod under Pod Security
	// restricted. Control mode only.
	Restricted bool
	Version    bool
	Help       bool
}

// ID is a uid:gid pair.
type ID struct{ UID, GID uint32 }

// DefaultGrace is the plain-mode TERM→KILL grace.
const DefaultGrace = 2 * time.Second

// DefaultSpecTimeout is how long a control-mode watcher waits for the
// host's hello and spec. A host that created the box and died before it
// attached (a pod starts at once, with nobody on its stdin) would
// otherwise leave a watcher waiting for ever; the supervisor sends both
// as soon as it is attached, so a minute only ever runs out on a box
// nobody will drive.
const DefaultSpecTimeout = time.Minute

const usage = `usage: watcher [flags] -- CMD [ARGS...]   run CMD as a tini-compatible init
       watcher --control=stdin|fd:N|unix:PATH [flags]  run what the host's spec frame says
       watcher relay PATH                    carry a control stream between stdin/stdout and PATH

The control stream is deathwatch's liveness channel: when it reaches EOF,
goes silent past the spec's heartbeat or carries a malformed frame, every
process of the box is killed.

flags:
  --control=stdin|fd:N     control mode: frames on fds 0/1, or both ways on fd N
  --control=unix:PATH      control mode: one connection on socket PATH (from watcher relay),
                           in a folder the watcher makes; the agent's output also goes to fds 1/2
  --nonce=NONCE            unix control mode: the nonce the host's hello must carry
  --deadline=DURATION      plain mode: TERM, then KILL after the grace, at this age (0: none)
  --grace=DURATION         plain mode: how long TERM may take before KILL (default 2s)
  --user=UID:GID           plain mode: run CMD as this identity, without capabilities
  --watcher-user=UID:GID   the identity the watcher keeps once the agent runs (default 65533:65533)
  --spec-timeout=DURATION  control mode: exit (liveness lost) when no spec arrives by then (default 1m)
  --allow-root             plain mode: accept --user 0:0
  --restricted             control mode, a box without capabilities at a non-root uid (Kubernetes Pod
                           Security restricted): run the agent at the watcher's uid, PID 1 not dumpable,
                           behind Landlock's signal scope and a seccomp wall on prlimit/setpriority/sched_set*
                           (Linux 6.12 or later; refused below)
  --version                print the version
`

// parseFlags reads the command line: flags, then the command.
func parseFlags(args []string) (*Config, error) {
	p := cmdline{c: &Config{Grace: DefaultGrace, SpecTimeout: DefaultSpecTimeout, WatcherUser: ID{shared.DefaultWatcherUID, shared.DefaultWatcherGID}}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			p.c.Argv = args[i+1:]
			break
		}
		if !strings.HasPrefix(a, "-") {
			// tini accepts the command without "--"; so do we.
			p.c.Argv = args[i:]
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if p.c.setSwitch(name) {
			continue
		}
		set := valueFlag(name)
		if set == nil {
			return nil, errors.New("unknown flag " + a + " (see watcher --help)")
		}
		if !hasVal {
			if i+1 >= len(args) {
				return nil, errors.New("flag --" + name + " needs a value")
			}
			i++
			val = args[i]
		}
		if err := set(&p, name, val); err != nil {
			return nil, err
		}
	}
	if err := p.checkMode(); err != nil {
		return nil, err
	}
	return p.c, nil
}

// cmdline is parseFlags' state.
type cmdline struct {
	c              *Config
	specTimeoutSet bool
}

// setSwitch sets a flag that takes no value; it reports false for any
// other name.
func (c *Config) setSwitch(name string) bool {
	switch name {
	case "version":
		c.Version = true
	case "h", "help":
		c.Help = true
	case "allow-root":
		c.AllowRoot = true
	case "restricted":
		c.Restricted = true
	default:
		return false
	}
	return true
}

// valueFlags are the flags that take a value, each with what it sets.
// The descriptor flags are set by the outer watcher or the native
// runtime only, and are not in the usage.
var valueFlags = [...]struct {
	name string
	set  func(p *cmdline, name, v string) error
}{
	{"parent-fd", func(p *cmdline, name, v string) (err error) { p.c.ParentFD, err = fdValue(name, v); return }},
	{"agent-cgroup-fd", func(p *cmdline, name, v string) (err error) { p.c.AgentCgroupFD, err = fdValue(name, v); return }},
	{"watcher-cgroup-fd", func(p *cmdline, name, v string) (err error) { p.c.WatcherCgroupFD, err = fdValue(name, v); return }},
	{"live-fd", func(p *cmdline, name, v string) (err error) { p.c.LiveFD, err = fdValue(name, v); return }},
	{"control", func(p *cmdline, _, v string) error { return p.c.setControl(v) }},
	{"nonce", func(p *cmdline, _, v string) error { p.c.Nonce = v; return nil }},
	{"deadline", func(p *cmdline, name, v string) (err error) {
		p.c.Deadline, err = durationValue(name, v, false)
		return
	}},
	{"grace", func(p *cmdline, name, v string) (err error) { p.c.Grace, err = durationValue(name, v, false); return }},
	{"spec-timeout", func(p *cmdline, name, v string) (err error) {
		p.c.SpecTimeout, err = durationValue(name, v, true)
		p.specTimeoutSet = true
		return
	}},
	{"user", func(p *cmdline, name, v string) error {
		id, err := idValue(name, v)
		p.c.User = &id
		return err
	}},
	{"watcher-user", func(p *cmdline, name, v string) (err error) { p.c.WatcherUser, err = idValue(name, v); return }},
}

// valueFlag is the setter of a flag that takes a value, nil for an
// unknown name.
func valueFlag(name string) func(p *cmdline, name, v string) error {
	for _, f := range valueFlags {
		if f.name == name {
			return f.set
		}
	}
	return nil
}

// checkMode refuses what the mode does not take: control mode reads the
// command, the identity and the deadline from the spec frame; plain mode
// needs a command and has no spec to wait for.
func (p *cmdline) checkMode() error {
	c := p.c
	if c.Version || c.Help {
		return nil
	}
	if c.Nonce != "" && c.Control != "unix" {
		return errors.New("flag --nonce is for the unix control mode (--control=unix:PATH)")
	}
	if c.Control != "" {
		if len(c.Argv) > 0 {
			return errors.New("control mode takes its command from the spec frame, not from the command line")
		}
		if c.User != nil || c.Deadline != 0 {
			return errors.New("control mode takes --user and --deadline from the spec frame, not from flags")
		}
		return nil
	}
	if p.specTimeoutSet {
		return errors.New("flag --spec-timeout is for control mode (--control=stdin|fd:N)")
	}
	if c.Restricted {
		return errors.New("flag --restricted is for control mode (--control=stdin|fd:N)")
	}
	if len(c.Argv) == 0 {
		return errors.New("no command: use watcher [flags] -- CMD [ARGS...] or watcher --control=stdin")
	}
	if c.User != nil && (c.User.UID == 0 || c.User.GID == 0) && !c.AllowRoot {
		return errRootRefused
	}
	return nil
}

// fdValue reads a descriptor the host passes down: above 2, which are
// the standard streams.
func fdValue(name, v string) (int, error) {
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return fd, errors.New("flag --" + name + ": " + strconv.Quote(v) + " is not a descriptor above 2")
	}
	return fd, nil
}

// durationValue reads a duration, not negative, and not 0 when positive.
func durationValue(name, v string, positive bool) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil && (d < 0 || d == 0 && positive) {
		err = errors.New("out of range")
	}
	if err != nil {
		return d, errors.New("flag --" + name + ": " + strconv.Quote(v) + " is not a duration like 30s or 5m")
	}
	return d, nil
}

func idValue(name, v string) (ID, error) {
	id, err := parseID(v)
	if err != nil {
		return id, errors.New("flag --" + name + ": " + err.Error())
	}
	return id, nil
}

// errRootRefused is a refusal (shared.ExitRefused), not a usage error.
var errRootRefused = errors.New("--user 0 runs the agent as root; pass --allow-root to accept that")

func (c *Config) setControl(v string) error {
	switch {
	case v == "stdin":
		c.Control = v
		return nil
	case strings.HasPrefix(v, "fd:"):
		n, err := strconv.Atoi(v[3:])
		if err != nil || n < 0 {
			return errors.New("flag --control: " + strconv.Quote(v) + " is not fd:N")
		}
		c.Control, c.ControlFD = "fd", n
		return nil
	case strings.HasPrefix(v, "unix:"):
		p := v[5:]
		if !strings.HasPrefix(p, "/") || len(p) > 100 || strings.Count(p, "/") < 2 {
			return errors.New("flag --control: " + strconv.Quote(v) + " is not unix:/DIR/SOCKET (an absolute path of at most 100 bytes, in a folder the watcher makes)")
		}
		c.Control, c.ControlPath = "unix", p
		return nil
	}
	return errors.New("flag --control: " + strconv.Quote(v) + " is none of stdin, fd:N, unix:PATH")
}

func parseID(s string) (ID, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return ID{}, errors.New(strconv.Quote(s) + " is not UID:GID (numbers, like 1000:1000)")
	}
	return ID{uint32(uid), uint32(gid)}, nil
}
