package cli

import (
	"context"
	"deathwatch/supervisor/journal"
	"io"
	"os"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/hostcheck"
	"deathwatch/supervisor/internal/survival"
)

// DoctorCmd is `supervisor doctor`.
type DoctorCmd struct {
	Runtime        string        `help:"Runtime to check in depth (image, staging probe, proof): ${runtimes_list}, or auto (${auto_help})." enum:"auto,${runtimes}" default:"auto" env:"DEATHWATCH_RUNTIME"`
	Image          string        `help:"The image (docker/podman) or rootfs directory (native) the controller will use." env:"DEATHWATCH_IMAGE"`
	WatcherInImage string        `help:"Where the image carries a watcher (checked by running it with --version)." default:"/usr/local/bin/watcher" placeholder:"PATH"`
	Watcher        string        `help:"Host watcher binary (default: next to the supervisor, then PATH)." placeholder:"PATH"`
	Staging        string        `help:"Staging directory to probe (default: a fresh one under the temp folder)." placeholder:"DIR"`
	AllowRootful   bool          `help:"Accept a rootful engine."`
	Posture        string        `help:"required: a usable runtime, a watcher and a passing prove-deathwatch; preferred: a usable runtime." enum:"required,preferred" default:"required"`
	Trials         int           `help:"prove-deathwatch trials per path." default:"3"`
	SkipProof      bool          `help:"Do not run prove-deathwatch (the required posture is then not met)."`
	Timeout        time.Duration `help:"Bound on each probe box." default:"60s"`
	Heartbeat      time.Duration `help:"The --heartbeat the controller's exec will use (0: none)." default:"10s"`
	Deadline       time.Duration `help:"The --deadline the controller's exec will use (0: none)." default:"1h"`
	Grace          time.Duration `help:"The --grace the controller's exec will use." default:"2s"`
	JSON           bool          `help:"Print JSON." name:"json"`
}

// Help is the long help of doctor.
func (DoctorCmd) Help() string {
	return `One command a controller runs before it dispatches anything. It reports which runtimes
are present and usable (every runtime of this build) with their versions, rootless or
rootful (a rootful engine is refused unless --allow-rootful), the cgroup version, the
host watcher and whether the image carries one (and which version), whether a staging
directory is visible from inside a box (a nonce file read from inside decides bind vs
copy-in: by proof, never by the engine's name), the prove-deathwatch result, and the
bound a controller gets with --heartbeat, --deadline and --grace (exec's defaults unless
given): the required posture refuses settings that leave a frozen controller's boxes
running for ever (--heartbeat 0 --deadline 0).

Exit status: 0 the posture is met; 243 it is not (the problems are listed).`
}

// Run is `supervisor doctor`.
func (d *DoctorCmd) Run(g *Globals, c *cmdContext) error {
	if !journal.ValidName(g.Instance) || len(g.Instance) > 120 {
		return exitcode.Usage("--instance %q: use letters, digits, '_', '.', '-' (at most 120)", g.Instance)
	}
	if d.Trials < 1 {
		return exitcode.Usage("--trials must be at least 1")
	}
	env := c.env
	if env == nil {
		env = os.Environ()
	}
	log := g.logger(c.stderr)
	rep := hostcheck.Doctor(context.Background(), &hostcheck.DoctorOptions{
		Runtime: d.Runtime, Image: d.Image, WatcherInImage: d.WatcherInImage, Watcher: d.Watcher, Staging: d.Staging,
		AllowRootful: d.AllowRootful, Posture: d.Posture, Trials: d.Trials, SkipProof: d.SkipProof, Timeout: d.Timeout,
		Survival: survival.Limits{Heartbeat: d.Heartbeat, Deadline: d.Deadline, Grace: d.Grace},
		Instance: g.Instance, JournalDir: g.journalDir(), Self: c.self, EngineEnv: env, Log: log,
	})
	if err := c.print(d.JSON, rep, func(w io.Writer) { hostcheck.WriteDoctorTable(w, rep) }); err != nil {
		return err
	}
	if !rep.OK {
		c.code = shared.ExitRefused
	}
	return nil
}
