package cli

// The flags of exec mapped onto supervisor.ExecOptions, one topic a step.

import (
	"path/filepath"
	"slices"
	"strings"
	"time"

	"deathwatch/supervisor"
	boxcopy "deathwatch/supervisor/copy"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/internal/watcherpath"
	"deathwatch/supervisor/journal"
)

// options turns the flags into supervisor.ExecOptions, refusing what is
// bad before anything exists: each step maps one topic's flags.
func (e *ExecCmd) options(g *Globals, c *cmdContext) (*supervisor.ExecOptions, error) {
	o := &supervisor.ExecOptions{
		Instance: g.Instance, JournalDir: g.journalDir(), Runtime: e.Runtime, Image: e.Image,
		NamePrefix: e.Name, RunKey: e.RunKey, Workdir: e.Workdir, PidsLimit: e.PidsLimit,
		AllowRootful: e.AllowRootful, AllowUserns: e.AllowUserns, AllowHostNetwork: e.AllowHostNet,
		WatcherInImage: e.WatcherInImage, Argv: e.Command,
		TTY: e.TTY, Stdin: e.Stdin, ReadWriteRoot: e.ReadWriteRoot, RequireLandlock: e.RequireLandlock,
	}
	steps := []func(*supervisor.ExecOptions) error{
		e.runtimeOptions, e.boundOptions, func(o *supervisor.ExecOptions) error { return e.nameOptions(g, o) },
		func(o *supervisor.ExecOptions) error { return e.agentOptions(c, o) }, e.mountOptions, e.copyOptions,
		e.limitOptions, e.userOptions, func(o *supervisor.ExecOptions) error { return e.watcherOptions(c, o) },
	}
	for _, step := range steps {
		if err := step(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// runtimeOptions: the network, the host ports and the image or template.
func (e *ExecCmd) runtimeOptions(o *supervisor.ExecOptions) error {
	if len(e.HostPort) > 0 {
		o.HostPorts = e.HostPort
	}
	o.Network, o.NetworkSet = e.Network, e.Network != ""
	switch o.Network {
	case "":
		o.Network = supervisor.DefaultNetwork
	case "none", "bridge", "host":
	default:
		return exitcode.Usage("--network %q: want none, bridge or host", e.Network)
	}
	switch {
	case e.Template != "" && e.Image != "" && e.Template != e.Image:
		return exitcode.Usage("--template %s and --image %s name two things; pass one", e.Template, e.Image)
	case e.Template != "":
		o.Image = e.Template
	}
	return nil
}

// boundOptions: the deadline, grace and heartbeat. On the command line
// 0 is the explicit "off"; in ExecOptions 0 means "the default".
func (e *ExecCmd) boundOptions(o *supervisor.ExecOptions) error {
	if e.Deadline < 0 || e.Grace < 0 || e.Heartbeat < 0 {
		return exitcode.Usage("--deadline, --grace and --heartbeat must not be negative")
	}
	if e.Heartbeat > 0 && e.Heartbeat < 30*time.Millisecond {
		return exitcode.Usage("--heartbeat %s is too short (at least 30ms)", e.Heartbeat)
	}
	off := func(d time.Duration) time.Duration {
		if d == 0 {
			return supervisor.Disabled
		}
		return d
	}
	o.Deadline, o.Grace, o.Heartbeat = off(e.Deadline), off(e.Grace), off(e.Heartbeat)
	return nil
}

// nameOptions: the instance, the box name's prefix, the run key and
// the labels.
func (e *ExecCmd) nameOptions(g *Globals, o *supervisor.ExecOptions) error {
	if !journal.ValidName(g.Instance) {
		return exitcode.Usage("--instance %q: use letters, digits, '_', '.', '-' (at most 128)", g.Instance)
	}
	if !journal.ValidName(e.Name) || len(e.Name) > 40 {
		return exitcode.Usage("--name %q: use letters, digits, '_', '.', '-' (at most 40)", e.Name)
	}
	if e.RunKey != "" && (strings.ContainsAny(e.RunKey, "\n\x00,") || len(e.RunKey) > 256) {
		return exitcode.Usage("--run-key: no newline, NUL or comma, at most 256 bytes")
	}
	var err error
	o.Labels, err = parseLabels(e.Label)
	return err
}

// agentOptions: the command, its environment, its working directory
// and the controller it dies with.
func (e *ExecCmd) agentOptions(c *cmdContext, o *supervisor.ExecOptions) error {
	// kong keeps the "--" that ends the flags in a partial passthrough.
	if len(o.Argv) > 0 && o.Argv[0] == "--" {
		o.Argv = o.Argv[1:]
	}
	if len(o.Argv) == 0 {
		return exitcode.Usage("name the agent command after --, e.g. supervisor exec --image IMAGE -- echo hi")
	}
	if e.Workdir != "" && (!filepath.IsAbs(e.Workdir) || filepath.Clean(e.Workdir) != e.Workdir) {
		return exitcode.Usage("--workdir %q: want a clean absolute path", e.Workdir)
	}
	var err error
	if o.AgentEnv, err = resolveEnv(e.Env, e.EnvFile, c.getenv); err != nil {
		return err
	}
	// Under --tty the agent's terminal is the caller's kind, as docker
	// -t sets it, unless the agent's environment names one.
	if term, ok := lookupTERM(c); e.TTY && ok && term != "" && !slices.ContainsFunc(o.AgentEnv, func(kv string) bool { return strings.HasPrefix(kv, "TERM=") }) {
		o.AgentEnv = append(o.AgentEnv, "TERM="+term)
	}
	o.Controller, err = parseController(e.ControllerFD, e.ControllerPID, e.Detach)
	return err
}

// mountOptions: --mount and --mount-owner.
func (e *ExecCmd) mountOptions(o *supervisor.ExecOptions) error {
	var err error
	if o.Mounts, err = parseMounts(e.Mount); err != nil {
		return err
	}
	if e.MountOwner == "" {
		return nil
	}
	uid, gid, err := parseUser(e.MountOwner)
	if err != nil {
		return exitcode.Usage("--mount-owner %q: %w", e.MountOwner, err)
	}
	if uid == 0 || gid == 0 {
		return exitcode.Refused("--mount-owner %q: root is never mapped onto the agent; name a host account that is not root", e.MountOwner)
	}
	o.MountOwner = &supervisor.HostIDs{UID: uid, GID: gid}
	return nil
}

// copyOptions: --copy-in, --copy-out and the copy-out's limits, as the
// copy party.
func (e *ExecCmd) copyOptions(o *supervisor.ExecOptions) error {
	var co boxcopy.Options
	var err error
	if co.In, co.Out, err = parseCopies(e.CopyIn, e.CopyOut); err != nil {
		return err
	}
	if limit, err := parseBytes(e.CopyOutLimit); err != nil {
		return exitcode.Usage("--copy-out-limit %q: %w", e.CopyOutLimit, err)
	} else if len(co.Out) > 0 {
		co.OutLimit = limit
	}
	if e.CopyOutMaxEntries < 1 {
		return exitcode.Usage("--copy-out-max-entries %d: want 1 or more", e.CopyOutMaxEntries)
	} else if len(co.Out) > 0 {
		co.OutMaxEntries = e.CopyOutMaxEntries
	}
	o.Parties = append(o.Parties, boxcopy.New(co))
	return nil
}

// limitOptions: --memory and --pids-limit.
func (e *ExecCmd) limitOptions(o *supervisor.ExecOptions) error {
	if e.PidsLimit < 0 {
		return exitcode.Usage("--pids-limit must not be negative")
	}
	if e.Memory == "" {
		return nil
	}
	var err error
	if o.Memory, err = parseSize(e.Memory); err != nil {
		return exitcode.Usage("--memory %q: %w", e.Memory, err)
	}
	return nil
}

// userOptions: --user. 0:0 is refused here: in ExecOptions it means the
// default.
func (e *ExecCmd) userOptions(o *supervisor.ExecOptions) error {
	var err error
	if o.UID, o.GID, err = parseUser(e.User); err != nil {
		return exitcode.Usage("--user %q: %w", e.User, err)
	}
	if o.UID == 0 && o.GID == 0 {
		return exitcode.Refused("--user %d:%d: the agent never runs as root (uid or gid 0); pick another UID:GID", o.UID, o.GID)
	}
	// A rootful engine without userns-remap runs the agent as this very
	// host gid: the docker group's socket is the host's root. (Native
	// boxes map every id into a range of their own: /etc/group is not
	// read on a native launch.)
	if e.Runtime != "native" {
		if g := powerGroup(o.GID, hostGroupFile); g != "" {
			return exitcode.Refused("--user %q: gid %d is the host's group %s, which grants power over the host (an engine socket, disks, logs or sudo) to a box of a rootful engine; pick a gid no host group has", e.User, o.GID, g)
		}
	}
	return nil
}

// watcherOptions: the watcher the box runs, the host's or the image's.
func (e *ExecCmd) watcherOptions(c *cmdContext, o *supervisor.ExecOptions) error {
	if e.WatcherInImage != "" && !filepath.IsAbs(e.WatcherInImage) {
		return exitcode.Usage("--watcher-in-image %q: want an absolute path inside the image", e.WatcherInImage)
	}
	if d, _ := supervisor.Lookup(e.Runtime); d.ImageWatcher != "" {
		if e.Watcher != "" {
			return exitcode.Usage("--watcher: %s boxes cannot take the host's watcher; the template carries one (--watcher-in-image, default %s)", e.Runtime, d.ImageWatcher)
		}
		return nil
	}
	if e.WatcherInImage != "" {
		return nil
	}
	var err error
	if o.WatcherPath, err = watcherpath.Find(e.Watcher, c.self); err != nil && !hostWatcherOnly(e.Runtime) {
		return err
	}
	return nil
}

// lookupTERM is the caller's TERM, if it has one.
func lookupTERM(c *cmdContext) (string, bool) {
	if c.getenv == nil {
		return "", false
	}
	return c.getenv("TERM")
}
