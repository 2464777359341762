package cli

import (
	"context"
	"deathwatch/supervisor/journal"
	"fmt"
	"io"
	"os"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/hostcheck"
	"deathwatch/supervisor/internal/instance"
)

// ProveCmd is `supervisor prove-deathwatch`.
type ProveCmd struct {
	Runtime        string        `help:"Runtime to prove: ${runtimes_list}." enum:"${runtimes}" default:"${default_prove}"`
	Image          string        `help:"Image (docker/podman) or rootfs directory (native; default: the host's root read-only)." env:"DEATHWATCH_IMAGE"`
	Trials         int           `help:"Trials per path." default:"10"`
	Path           []string      `help:"Paths to prove (repeatable): controller, sigkill, heartbeat, deadline." enum:"controller,sigkill,heartbeat,deadline" default:"controller,sigkill,heartbeat,deadline"`
	Bound          time.Duration `help:"Bound from the trigger to the last agent process dead (0: the runtime's default, 250ms); heartbeat and deadline add their own delay." default:"0s"`
	RemoveBound    time.Duration `help:"Bound from the trigger to the box removed (0: the runtime's default — ${remove_bounds})." default:"0s"`
	Heartbeat      time.Duration `help:"The heartbeat of the heartbeat path (pings go every third of it)." default:"1s"`
	Deadline       time.Duration `help:"The deadline of the deadline path." default:"1s"`
	Grace          time.Duration `help:"The TERM-to-KILL grace of the deadline path." default:"500ms"`
	Strict         bool          `help:"Hold every trial to the bound alone: no allowance for the host's own wake-up delay (see below)."`
	AllowRootful   bool          `help:"Accept a rootful engine (passed to the stand-in's exec)."`
	Watcher        string        `help:"Host watcher binary for the stand-in's exec." placeholder:"PATH"`
	WatcherInImage string        `help:"Use the watcher baked into the image at PATH." placeholder:"PATH"`
	JSON           bool          `help:"Print JSON." name:"json"`
}

// Help is the long help of prove-deathwatch.
func (ProveCmd) Help() string {
	return `Proves the death-watch on this host: a stand-in (a child "supervisor exec" running an
agent with a setsid'd and a TERM-ignoring descendant) is started, and once its agent is
ready:
  controller the stand-in's controller, a separate process (sh) that runs "supervisor
             exec" as its child, is SIGKILLed: the supervisor sees its parent die and
             ends the box; measured until every process of the box is dead and until
             the box is removed;
  sigkill    the supervisor itself is SIGKILLed: the watcher sees its control stream end;
             measured the same;
  heartbeat  the stand-in is frozen (SIGSTOP) with --heartbeat; the watcher must notice
             the silence and kill the box;
  deadline   the stand-in is frozen, every agent process ignores TERM; the in-box
             deadline must end it within deadline + grace.
The box's processes are seen from the host: its PID 1 (as the runtime reports it),
its descendants and its PID namespace. The stand-ins
use the instance INSTANCE.prove; what they leave goes through reconcile after each trial.

The bounds are what an idle host gives. A busy host delays every hop of the kill chain
(the watcher's timer, its kill, the victims' exit, this command's poll) by as long as its
scheduler keeps a woken thread waiting; each trial measures that wait (HOST-DELAY). A slow
CPU (an emulated one) makes every hop longer without making it late: before the first trial
the proof times a SIGKILL and reap of a sleeping child against a 200µs reference ("cpu:" line),
and a CPU N times slower allows the kill chain's part of each bound N times over. A trial
over its bound by no more than 4 times its HOST-DELAY plus that passes as
"pass (busy/slow host)", listed. --strict refuses both allowances. The report ends with
what exec's defaults give a controller on this host (--heartbeat 10s, --deadline 1h,
--grace 2s).

Exit status: 0 every trial within its bound and nothing left; 243 a trial exceeded its
bound or left something behind; the stand-in's status (241 engine, 242 image, ...) when
it could not run at all.`
}

func (p *ProveCmd) options(g *Globals, c *cmdContext) (*hostcheck.ProveOptions, error) {
	if !journal.ValidName(g.Instance) || len(g.Instance) > 120 {
		return nil, exitcode.Usage("--instance %q: use letters, digits, '_', '.', '-' (at most 120)", g.Instance)
	}
	if p.Trials < 1 {
		return nil, exitcode.Usage("--trials must be at least 1")
	}
	if p.Heartbeat < 30*time.Millisecond || p.Deadline <= 0 || p.Grace < 0 || p.Bound < 0 || p.RemoveBound < 0 {
		return nil, exitcode.Usage("--heartbeat (at least 30ms), --deadline (positive), --grace, --bound and --remove-bound (not negative)")
	}
	desc, _ := supervisor.Lookup(p.Runtime)
	b := desc.Bounds
	if p.Bound > 0 {
		b.Dead = p.Bound
	}
	if p.RemoveBound > 0 {
		b.Removed = p.RemoveBound
	}
	self := c.self
	if self == "" {
		return nil, exitcode.Setup("cannot find the supervisor's own binary to run the stand-in")
	}
	env := c.env
	if env == nil {
		env = os.Environ()
	}
	return &hostcheck.ProveOptions{
		Self: self, Instance: instance.Prove(g.Instance), JournalDir: g.journalDir(), Runtime: p.Runtime, Image: p.Image,
		Trials: p.Trials, Paths: p.Path, Bounds: b, Heartbeat: p.Heartbeat, Deadline: p.Deadline, Grace: p.Grace, Strict: p.Strict,
		AllowRootful: p.AllowRootful, Watcher: p.Watcher, WatcherInImage: p.WatcherInImage, EngineEnv: env, Log: g.logger(c.stderr),
	}, nil
}

// Run is `supervisor prove-deathwatch`.
func (p *ProveCmd) Run(g *Globals, c *cmdContext) error {
	o, err := p.options(g, c)
	if err != nil {
		return err
	}
	rep := hostcheck.Prove(context.Background(), *o)
	if err := c.print(p.JSON, rep, func(w io.Writer) { hostcheck.WriteProveTable(w, rep) }); err != nil {
		return err
	}
	switch {
	case rep.Error != "":
		fmt.Fprintf(c.stderr, "supervisor: prove-deathwatch could not run: %s\n", rep.Error)
		c.code = rep.Code
	case !rep.Pass:
		c.code = shared.ExitRefused
	}
	return nil
}
