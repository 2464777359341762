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
	Control   string // "", "stdin" or "fd:N"
	ControlFD int    // N for fd:N
	Argv      []string
	Deadline  time.Duration
	Grace     time.Duration
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
	// leaveAgentCgroup); 0 when there is none.
	WatcherCgroupFD int
	// LiveFD is the read end of the native runtime's live pipe (see
	// livefifo.go); 0 when there is none.
	LiveFD  int
	Version bool
	Help    bool
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
       watcher --control=stdin|fd:N [flags]  run what the host's spec frame says

The control stream is deathwatch's liveness channel: when it reaches EOF,
goes silent past the spec's heartbeat or carries a malformed frame, every
process of the box is killed.

flags:
  --control=stdin|fd:N     control mode: frames on fds 0/1, or both ways on fd N
  --deadline=DURATION      plain mode: TERM, then KILL after the grace, at this age (0: none)
  --grace=DURATION         plain mode: how long TERM may take before KILL (default 2s)
  --user=UID:GID           plain mode: run CMD as this identity, without capabilities
  --watcher-user=UID:GID   the identity the watcher keeps once the agent runs (default 65533:65533)
  --spec-timeout=DURATION  control mode: exit (liveness lost) when no spec arrives by then (default 1m)
  --allow-root             plain mode: accept --user 0:0
  --version                print the version
`

func parseFlags(args []string) (*Config, error) {
	c := &Config{Grace: DefaultGrace, SpecTimeout: DefaultSpecTimeout, WatcherUser: ID{shared.DefaultWatcherUID, shared.DefaultWatcherGID}}
	specTimeoutSet := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			c.Argv = args[i+1:]
			break
		}
		if !strings.HasPrefix(a, "-") {
			// tini accepts the command without "--"; so do we.
			c.Argv = args[i:]
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		value := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", errors.New("flag --" + name + " needs a value")
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "version":
			c.Version = true
		case "h", "help":
			c.Help = true
		case "allow-root":
			c.AllowRoot = true
		case "parent-fd", "agent-cgroup-fd", "watcher-cgroup-fd", "live-fd": // set by the outer watcher or the native runtime only; not in the usage
			var v string
			var fd int
			if v, err = value(); err == nil {
				if fd, err = strconv.Atoi(v); err != nil || fd < 3 {
					err = errors.New("flag --" + name + ": " + strconv.Quote(v) + " is not a descriptor above 2")
				}
			}
			switch name {
			case "parent-fd":
				c.ParentFD = fd
			case "live-fd":
				c.LiveFD = fd
			case "watcher-cgroup-fd":
				c.WatcherCgroupFD = fd
			default:
				c.AgentCgroupFD = fd
			}
		case "control":
			var v string
			if v, err = value(); err == nil {
				err = c.setControl(v)
			}
		case "deadline", "grace", "spec-timeout":
			var v string
			var d time.Duration
			if v, err = value(); err == nil {
				if d, err = time.ParseDuration(v); err == nil && (d < 0 || d == 0 && name == "spec-timeout") {
					err = errors.New("out of range")
				}
				if err != nil {
					err = errors.New("flag --" + name + ": " + strconv.Quote(v) + " is not a duration like 30s or 5m")
				}
			}
			switch name {
			case "deadline":
				c.Deadline = d
			case "grace":
				c.Grace = d
			default:
				c.SpecTimeout, specTimeoutSet = d, true
			}
		case "user", "watcher-user":
			var v string
			var id ID
			if v, err = value(); err == nil {
				if id, err = parseID(v); err != nil {
					err = errors.New("flag --" + name + ": " + err.Error())
				}
			}
			if name == "user" {
				c.User = &id
			} else {
				c.WatcherUser = id
			}
		default:
			err = errors.New("unknown flag " + a + " (see watcher --help)")
		}
		if err != nil {
			return nil, err
		}
	}
	if c.Version || c.Help {
		return c, nil
	}
	if c.Control != "" {
		if len(c.Argv) > 0 {
			return nil, errors.New("control mode takes its command from the spec frame, not from the command line")
		}
		if c.User != nil || c.Deadline != 0 {
			return nil, errors.New("control mode takes --user and --deadline from the spec frame, not from flags")
		}
		return c, nil
	}
	if specTimeoutSet {
		return nil, errors.New("flag --spec-timeout is for control mode (--control=stdin|fd:N)")
	}
	if len(c.Argv) == 0 {
		return nil, errors.New("no command: use watcher [flags] -- CMD [ARGS...] or watcher --control=stdin")
	}
	if c.User != nil && (c.User.UID == 0 || c.User.GID == 0) && !c.AllowRoot {
		return nil, errRootRefused
	}
	return c, nil
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
	}
	return errors.New("flag --control: " + strconv.Quote(v) + " is neither stdin nor fd:N")
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
