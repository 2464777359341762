// Package docker is the Docker and Podman runtime: it talks to the
// engine's API (Docker's Engine API, or Podman's Docker-compatible
// service) when it can reach it, and drives the engine's CLI (docker or
// podman on PATH) where it cannot; every request body and argv is built
// by a pure function. It registers two runtimes, "docker" and "podman", and
// builds on Linux, macOS (Docker Desktop) and Windows.
package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/internal/attach"
	"deathwatch/supervisor/internal/defaultbounds"
	"deathwatch/supervisor/internal/firstline"
	"deathwatch/supervisor/mountsource"
)

// Engine is the Docker or Podman runtime: it drives the engine's CLI.
// Both CLIs share one set of argv builders where they agree.
type Engine struct {
	Kind      string   // "docker" | "podman"
	Bin       string   // the CLI to run; default Kind, looked up on PATH
	EngineEnv []string // the CLI's environment; nil: os.Environ()
	Stderr    io.Writer
	Log       *slog.Logger
	// ProveBind runs the bind proof of the live FIFO's folder
	// (livefifo_fifo.go); nil offers no live FIFO.
	ProveBind supervisor.BindProver

	rootless bool // what Probe found
	// usernsAuto: a podman with the subordinate ids for a user
	// namespace of each box's own (rootful: user "containers"'s;
	// rootless: the user's, room for more than one box).
	usernsAuto bool
	// hostIDs: the engine runs boxes on the host's own ids (rootful
	// docker without userns-remap, rootful podman without
	// usernsAuto): each box takes ids of its own (ownids_linux.go).
	// Docker's verdict may come later, from /info (onHostIDs).
	hostIDs bool
	// daemonIDs: a rootless docker daemon of this user whose boxes
	// take ids of their own in its user namespace (nsids_linux.go).
	daemonIDs *daemonIDs

	apiOnce sync.Once
	api     *apiClient // nil: the CLI serves
	// resolveOnce: the endpoint's client before the ping (resolve).
	resolveOnce    sync.Once
	resolved, bare *apiClient

	warnOnce sync.Once // warnShared says it once (OneStep and Probe may both run)
	// stated is closed once docker's /info, which the probe left the
	// rootful statement to, answered (nil: none pending; api.go), and
	// statement is what it said (statedBy says it).
	stated    chan struct{}
	statement supervisor.Info

	mu sync.Mutex
	// limits is what docker's /info said the daemon enforces (nil: /info
	// was not read before the box).
	limits *daemonLimits
	// remaps: docker's /info said the daemon remaps user ids
	// (userns-remap).
	remaps  bool
	pins    map[string]pinnedInit // box → its PID 1, for End (ender_linux.go)
	lives   map[string]*liveFIFO  // box → its live FIFO (livefifo_fifo.go)
	removed map[string]chan error // box → the engine's "removed" answer
	runs    map[string]*runEnd    // box → how its one-step run ended (run.go)
}

// The two engines' descriptors. Their bounds leave several times the
// room an engine's kill and removal take on a loaded two-core host
// (make bench and prove-deathwatch print today's figures).
// --runtime auto tries a rootless podman first, then docker.
func init() {
	for _, d := range []struct {
		kind    string
		rank    int
		removed time.Duration
	}{{"podman", 10, 3 * time.Second}, {"docker", 20, 2 * time.Second}} {
		kind := d.kind
		supervisor.Register(supervisor.Descriptor{
			Name:     kind,
			Daemon:   true,
			AutoRank: d.rank,
			Bounds:   supervisor.Bounds{Dead: 250 * time.Millisecond, Removed: d.removed},
			// The engine removes a box (--rm); it lists its boxes by label
			// (List): the intent finds them. A one-step podman run's
			// cidfile folder (run.go) is not in the engine's listing:
			// reconcile has Remove drop it when the engine removed the box
			// after a killed supervisor.
			Caps: supervisor.CapAutoRemove | supervisor.CapIntentFinds |
				supervisor.CapIf(kind == "podman", supervisor.CapUnlistedRemains),
			Installed: func(env []string) error {
				if _, err := exec.LookPath(kind); err == nil || apiSocketPresent(kind, env) {
					return nil
				}
				return fmt.Errorf("%s is not installed", kind)
			},
			New: func(c supervisor.RuntimeConfig) (supervisor.Runtime, error) {
				return &Engine{Kind: kind, Bin: kind, EngineEnv: c.EngineEnv, Stderr: c.Stderr, Log: c.Log, ProveBind: c.ProveBind}, nil
			},
		})
	}
}

// The capabilities the watcher needs to set up the agent, and nothing
// else: SETUID/SETGID to become the agent's and its own uid/gid (and
// clear supplementary groups), SETPCAP to empty the bounding set, KILL
// to signal an agent that is no longer its uid, CHOWN to give the
// agent's pty (exec --tty) to the agent, as a terminal belongs to its
// user. DAC_OVERRIDE lets the watcher write a --copy-in into a folder
// of the image it does not own, and read the dead agent's files for
// --copy-out (kept permitted, not effective, only then: see
// watcher/copy.go). The agent gets none of them; the watcher keeps KILL
// alone in effect.
var watcherCaps = []string{"SETUID", "SETGID", "SETPCAP", "KILL", "CHOWN", "DAC_OVERRIDE"}

// ---- pure argv builders ----

// infoArgs asks for the engine's version and whether it is rootless.
func infoArgs(kind string) []string {
	if kind == "podman" {
		return []string{"info", "--format", "{{.Version.Version}}|{{.Host.Security.Rootless}}"}
	}
	return []string{"info", "--format", "{{.ServerVersion}}|{{json .SecurityOptions}}"}
}

// podmanVersionArgs asks local Podman for its version.
func podmanVersionArgs() []string {
	return []string{"version", "--format", "{{.Client.Version}}"}
}

// parseInfo reads infoArgs' output: the version, whether the engine is
// rootless, and whether docker remaps user ids (userns-remap).
func parseInfo(kind, out string) (version string, rootless, remap bool, err error) {
	v, rest, ok := strings.Cut(strings.TrimSpace(out), "|")
	if !ok || v == "" {
		return "", false, false, fmt.Errorf("unexpected %s info output %q", kind, out)
	}
	if kind == "podman" {
		return v, rest == "true", false, nil
	}
	var opts []string
	if err := json.Unmarshal([]byte(rest), &opts); err != nil {
		return "", false, false, fmt.Errorf("parse docker security options %q: %w", rest, err)
	}
	for _, o := range opts {
		switch name, _, _ := strings.Cut(o, ","); name {
		case "name=rootless":
			rootless = true
		case "name=userns":
			remap = true
		}
	}
	return v, rootless, remap, nil
}

// imageCheckArgs checks that an image exists locally. Podman's `image
// exists` (exit 1: it does not) starts faster than `image inspect`.
func imageCheckArgs(kind, image string) []string {
	if kind == "podman" {
		return []string{"image", "exists", "--", image}
	}
	return []string{"image", "inspect", "--format", "{{.Id}}", "--", image}
}

// createArgs creates the box: the watcher as entrypoint with the
// control stream on its stdin, least privilege, no restart, no init of
// the engine's own (the watcher is PID 1), auto-removal when it stops.
// It spells createBody's request as flags: one description of the box
// serves the API and the CLI.
func createArgs(kind string, b *supervisor.Box, conf boxConf) []string {
	conf.kind = kind
	c := createBody(b, conf)
	h := c.HostConfig
	a := []string{"create",
		"--interactive", // keep stdin open: it is the control stream
		"--name", b.Name,
		"--pull", "never",
		"--init=false",
		"--restart", h.RestartPolicy.Name,
		"--rm", // the engine removes the box when the watcher exits (also after a supervisor SIGKILL)
		"--log-driver", h.LogConfig.Type,
	}
	for _, f := range []struct {
		flag string
		vs   []string
	}{{"--cap-drop", h.CapDrop}, {"--cap-add", h.CapAdd}, {"--security-opt", h.SecurityOpt}} {
		for _, v := range f.vs {
			a = append(a, f.flag, v)
		}
	}
	if h.UsernsMode != "" {
		a = append(a, "--userns", h.UsernsMode)
	}
	for _, e := range c.Env {
		a = append(a, "--env", e)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
		a = append(a, "--label", k+"="+c.Labels[k])
	}
	a = append(a, "--network", h.NetworkMode)
	if h.PidsLimit != nil {
		a = append(a, "--pids-limit", strconv.FormatInt(*h.PidsLimit, 10))
	}
	if h.Memory > 0 {
		a = append(a, "--memory", strconv.FormatInt(h.Memory, 10), "--memory-swap", strconv.FormatInt(h.MemorySwap, 10))
	}
	if h.ReadonlyRootfs {
		a = append(a, "--read-only")
	}
	for _, t := range slices.Sorted(maps.Keys(h.Tmpfs)) {
		a = append(a, "--tmpfs", t+":"+h.Tmpfs[t])
	}
	if h.ShmSize > 0 {
		a = append(a, "--shm-size", strconv.FormatInt(h.ShmSize, 10))
	}
	if c.WorkingDir != "" {
		a = append(a, "--workdir", c.WorkingDir)
	}
	for _, v := range h.Binds {
		a = append(a, "--volume", bindSpec(kind, v))
	}
	for _, m := range h.Mounts {
		a = append(a, "--mount", mountFlag(m))
	}
	a = append(a, "--entrypoint", c.Entrypoint[0], "--", c.Image)
	return append(a, c.Cmd...)
}

// bindSpec is a bind (SRC:DST[:ro]) as kind takes it: Podman's binds
// are nosuid and nodev, so no set-id program and no device node of a
// host folder works in the box. dockerd refuses those options ("invalid
// mode"); a Docker box holds the same line through no-new-privileges
// (set-id bits grant nothing), no capabilities (no mknod) and its
// device cgroup (no device but the box's own).
func bindSpec(kind, v string) string {
	if kind != "podman" {
		return v
	}
	if strings.HasSuffix(v, ":ro") {
		return v + ",nosuid,nodev"
	}
	return v + ":nosuid,nodev"
}

// mountFlag spells a bind mount as --mount takes it: comma-separated
// key=value fields, read as CSV by the CLI (a field with a comma or a
// quote is quoted).
func mountFlag(m apiMount) string {
	fields := []string{"type=" + m.Type, "source=" + m.Source, "target=" + m.Target}
	if m.ReadOnly {
		fields = append(fields, "readonly")
	}
	for i, f := range fields {
		if strings.ContainsAny(f, ",\"\n") {
			fields[i] = `"` + strings.ReplaceAll(f, `"`, `""`) + `"`
		}
	}
	return strings.Join(fields, ",")
}

// startArgs starts the box attached to its stdin, stdout and stderr,
// without a tty (frames are binary).
func startArgs(kind, name string) []string {
	return []string{"start", "--attach", "--interactive", "--", name}
}

// removeArgs removes the box at once. Podman's -t 0: without it Podman
// waits out a 10 s stop timeout first.
func removeArgs(kind, name string) []string {
	if kind == "podman" {
		return []string{"rm", "--force", "--time", "0", "--", name}
	}
	return []string{"rm", "--force", "--", name}
}

// listArgs lists every box (running or not) that carries the instance label.
func listArgs(kind, instance string) []string {
	format := dockerListFormat() // one object per line
	if kind == "podman" {
		format = "json" // one array, Labels as an object
	}
	return []string{"ps", "--all", "--no-trunc", "--filter", "label=" + shared.LabelInstance + "=" + instance, "--format", format}
}

// dwLabelKeys are the labels reconcile decides on.
var dwLabelKeys = []string{shared.LabelManaged, shared.LabelInstance, shared.LabelRunKey, shared.LabelLaunchID, shared.LabelNonce}

// dockerListFormat prints, per box, its names, state, the labels as
// docker ps joins them ("k=v,k=v"), and each deathwatch label read from
// the label map by its key ({{.Label KEY}}): a comma in a user label's
// value can never stand in for one of those.
var dockerListFormat = sync.OnceValue(func() string {
	var dw []string
	for _, k := range dwLabelKeys {
		dw = append(dw, fmt.Sprintf("%q:{{json (.Label %q)}}", k, k))
	}
	return `{"Names":{{json .Names}},"State":{{json .State}},"Labels":{{json .Labels}},"DW":{` + strings.Join(dw, ",") + `}}`
})

// parseList reads listArgs' output: docker prints one JSON object per
// line with Labels as "k=v,k=v" and the deathwatch labels read by key
// (DW, which wins); podman prints one JSON array with Labels as an
// object.
func parseList(kind string, out []byte) ([]supervisor.Listed, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return nil, nil
	}
	var ls []supervisor.Listed
	if kind == "podman" {
		var rows []struct {
			Names  []string
			Labels map[string]string
			State  string
		}
		if err := json.Unmarshal(out, &rows); err != nil {
			return nil, fmt.Errorf("parse podman ps output: %w", err)
		}
		for _, r := range rows {
			name := ""
			if len(r.Names) > 0 {
				name = r.Names[0]
			}
			ls = append(ls, supervisor.Listed{Name: name, Labels: r.Labels, Running: r.State == "running"})
		}
		return ls, nil
	}
	for _, line := range bytes.Split(out, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var r struct {
			Names, Labels, State string
			DW                   map[string]string
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("parse docker ps output: %w", err)
		}
		labels := parseLabelString(r.Labels)
		for _, k := range dwLabelKeys {
			delete(labels, k)
			if v := r.DW[k]; v != "" {
				labels[k] = v
			}
		}
		ls = append(ls, supervisor.Listed{Name: strings.Split(r.Names, ",")[0], Labels: labels, Running: r.State == "running"})
	}
	return ls, nil
}

// parseLabelString splits docker ps's "k=v,k=v". A part without '='
// belongs to the previous value (a value that held a comma). A value
// with a comma and '=' after it (task=a,io.deathwatch.nonce=x) reads as
// two labels: a key that appears twice is ambiguous and dropped, so a
// user label can never stand in for a deathwatch one (the box then
// lacks it, and reconcile leaves it alone and reports it).
func parseLabelString(s string) map[string]string {
	m := map[string]string{}
	seen := map[string]int{}
	last := ""
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok && last != "" {
			m[last] += "," + part
			continue
		}
		seen[k]++
		m[k] = v
		last = k
	}
	for k, n := range seen {
		if n > 1 {
			delete(m, k)
		}
	}
	return m
}

// imageWatcherArgs runs the image's watcher with --version in a
// throwaway box: no network, no privileges, removed at once.
func imageWatcherArgs(image, path string) []string {
	return []string{"run", "--rm", "--pull", "never", "--network", "none", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--entrypoint", path, "--", image, "--version"}
}

// ---- the runtime ----

// WatcherVersionCommand runs the image's watcher with --version.
func (e *Engine) WatcherVersionCommand(ctx context.Context, image, path string) *exec.Cmd {
	return e.command(ctx, imageWatcherArgs(image, path))
}

func (e *Engine) Name() string { return e.Kind }

func (e *Engine) bin() string {
	if e.Bin != "" {
		return e.Bin
	}
	return e.Kind
}

func (e *Engine) log() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

func (e *Engine) command(ctx context.Context, args []string) *exec.Cmd {
	var c *exec.Cmd
	if ctx == nil {
		c = exec.Command(e.bin(), args...)
	} else {
		c = exec.CommandContext(ctx, e.bin(), args...)
	}
	if e.EngineEnv != nil {
		c.Env = e.EngineEnv
	}
	return c
}

// run runs one short CLI call and returns its stdout; a failure carries
// the first line of its stderr.
func (e *Engine) run(ctx context.Context, args []string) ([]byte, error) {
	c := e.command(ctx, args)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	t0 := time.Now()
	err := c.Run()
	e.log().Debug("engine call", "cmd", e.bin(), "args", args, "took", time.Since(t0), "err", err)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, exitcode.Engine("%s is not installed (not found on PATH); install it or pick another --runtime", e.Kind)
		}
		return out.Bytes(), &cliError{args: args, stderr: firstline.Of(errb.String()), err: err}
	}
	return out.Bytes(), nil
}

type cliError struct {
	args   []string
	stderr string
	err    error
}

func (c *cliError) Error() string {
	if c.stderr != "" {
		return c.stderr
	}
	return c.err.Error()
}
func (c *cliError) Unwrap() error { return c.err }

// namedArgs lists the boxes whose name contains name, one name per line
// (docker prints a box's several names comma-separated).
func namedArgs(name string) []string {
	return []string{"ps", "--all", "--no-trunc", "--filter", "name=" + name, "--format", "{{.Names}}"}
}

// listsName reports whether namedArgs' output names exactly name.
func listsName(out []byte, name string) bool {
	for _, line := range strings.Split(string(out), "\n") {
		for _, n := range strings.Split(strings.TrimSpace(line), ",") {
			if strings.TrimPrefix(n, "/") == name {
				return true
			}
		}
	}
	return false
}

// client is the engine's API when this process can reach it, else nil
// (then the CLI serves: an ssh:// context, a named pipe, no podman
// service). It is chosen once, by trying, never by name: resolve the
// endpoint as the CLI would, then ping it.
func (e *Engine) client(ctx context.Context) *apiClient {
	e.apiOnce.Do(func() {
		c, _ := e.resolve()
		if c == nil {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.negotiate(pctx)
		cancel()
		if err != nil {
			e.log().Debug("engine api", "kind", e.Kind, "endpoint", c.ep.String(), "using", "cli", "why", err)
			return
		}
		e.log().Debug("engine api", "kind", e.Kind, "endpoint", c.ep.String(), "from", c.ep.From, "version", c.version)
		e.api = c
	})
	return e.api
}

// resolve finds the engine's endpoint as the CLI would, once, and makes
// its client without asking the engine anything: c, for client to ping,
// and bare, a copy of it that no ping changes (no API version: the
// engine's own), for a request sent beside the ping. nil, nil: no
// endpoint (the CLI serves).
func (e *Engine) resolve() (c, bare *apiClient) {
	e.resolveOnce.Do(func() {
		env := e.EngineEnv
		if env == nil {
			env = os.Environ()
		}
		m := envMap(env)
		var ep endpoint
		if e.Kind == "podman" {
			var ok bool
			if ep, ok = podmanEndpoint(m, os.Geteuid()); !ok {
				e.log().Debug("engine api", "kind", e.Kind, "using", "cli", "why", "no podman service socket")
				return
			}
		} else {
			var err error
			if ep, err = dockerEndpoint(m); err != nil {
				e.log().Debug("engine api", "kind", e.Kind, "using", "cli", "why", err)
				return
			}
		}
		c, err := newAPIClient(ep)
		if err != nil {
			e.log().Debug("engine api", "kind", e.Kind, "endpoint", ep.String(), "using", "cli", "why", err)
			return
		}
		b := *c
		e.resolved, e.bare = c, &b
	})
	return e.resolved, e.bare
}

// UsesAPI reports whether the engine is driven through its API.
func (e *Engine) UsesAPI(ctx context.Context) bool { return e.client(ctx) != nil }

func (e *Engine) Probe(ctx context.Context) (supervisor.Info, error) {
	if c := e.client(ctx); c != nil {
		info, err := e.apiProbe(ctx, c)
		e.podmanIDs(&info)
		e.warnShared(info)
		return info, err
	}
	info, err := e.cliProbe(ctx)
	e.warnShared(info)
	return info, err
}

// warnShared says once, on exec's stderr, what a rootful engine whose
// boxes share the host's ids means.
func (e *Engine) warnShared(info supervisor.Info) {
	if e.Stderr != nil && (info.Detail == rootfulNoUserns || info.Detail == podmanNoSubids || strings.Contains(info.Detail, sameIDs)) {
		e.warnOnce.Do(func() { fmt.Fprintln(e.Stderr, "supervisor: warning: "+info.Detail) })
	}
}

func (e *Engine) cliProbe(ctx context.Context) (supervisor.Info, error) {
	info := supervisor.Info{Runtime: e.Kind}
	if e.Kind == "podman" && !e.podmanRemote() {
		// Local Podman has no daemon: it is rootless exactly when it runs
		// as a user other than root, and `podman version` answers without
		// gathering the host's and storage's state, as `podman info` does.
		out, err := e.run(ctx, podmanVersionArgs())
		if err != nil {
			if exitcode.Of(err, 0) == shared.ExitEngine {
				info.Detail = err.Error()
				return info, err
			}
			info.Detail = fmt.Sprintf("podman does not work: %v", err)
			return info, exitcode.Engine("%s", info.Detail)
		}
		info.Present, info.Version, info.Rootless = true, strings.TrimSpace(string(out)), os.Geteuid() != 0
		e.rootless = info.Rootless
		e.podmanIDs(&info)
		return info, nil
	}
	out, err := e.run(ctx, infoArgs(e.Kind))
	if err != nil {
		if exitcode.Of(err, 0) == shared.ExitEngine {
			info.Detail = err.Error()
			return info, err
		}
		info.Detail = fmt.Sprintf("%s engine is not reachable: %v", e.Kind, err)
		if e.Kind == "docker" {
			env := envMap(e.env())
			info.Detail += dockerHostHint(env, err.Error(), rootlessSocket(env))
		}
		return info, exitcode.Engine("%s", info.Detail)
	}
	v, rootless, remap, err := parseInfo(e.Kind, string(out))
	if err != nil {
		info.Detail = err.Error()
		return info, exitcode.Engine("%s", info.Detail)
	}
	info.Present, info.Version, info.Rootless = true, v, rootless
	e.rootless, e.hostIDs = rootless, e.Kind == "docker" && !rootless && !remap
	e.podmanIDs(&info)
	return info, nil
}

// CheckImage asks docker's API beside the ping that settles the API
// version (on the unversioned path, which the engine serves as its own
// version; the answer's status is all that is read): one round trip
// before the create instead of two. Its answer counts once the ping
// said the API serves; else the CLI asks.
func (e *Engine) CheckImage(ctx context.Context, image string) error {
	if _, bare := e.resolve(); bare != nil && e.Kind == "docker" {
		bctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		go func() { res <- e.apiCheckImage(bctx, bare, image) }()
		if e.client(ctx) != nil {
			err := <-res
			cancel()
			return err
		}
		cancel()
		<-res
	} else if c := e.client(ctx); c != nil {
		return e.apiCheckImage(ctx, c, image)
	}
	_, err := e.run(ctx, imageCheckArgs(e.Kind, image))
	if err == nil {
		return nil
	}
	if exitcode.Of(err, 0) != 0 {
		return err
	}
	var ee *exec.ExitError
	podmanNo := e.Kind == "podman" && errors.As(err, &ee) && ee.ExitCode() == 1
	s := strings.ToLower(err.Error())
	if podmanNo || strings.Contains(s, "no such image") || strings.Contains(s, "image not known") || strings.Contains(s, "no such object") {
		return exitcode.Image("image %s not found in %s; build or load it first (deathwatch never pulls)", image, e.Kind)
	}
	return exitcode.Engine("inspect image %s: %w", image, err)
}

func (e *Engine) Create(ctx context.Context, b *supervisor.Box) (err error) {
	if err := mountsource.Check(b.Mounts); err != nil {
		return err
	}
	if err := e.ownIDs(ctx, b); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			e.dropOwnIDs(b)
		}
	}()
	if c := e.client(ctx); c != nil {
		return e.apiCreate(ctx, c, b)
	}
	if _, err := e.run(ctx, createArgs(e.Kind, b, e.boxConf())); err != nil {
		if exitcode.Of(err, 0) != 0 {
			return err
		}
		return exitcode.Setup("create box %s: %w", b.Name, err)
	}
	return nil
}

// ownIDs gives the box ids of its own when the engine would run it on
// the host's, or on the ids every box of a rootless docker daemon
// shares (takeOwnIDs).
func (e *Engine) ownIDs(ctx context.Context, b *supervisor.Box) error {
	if b.State == nil {
		b.State = map[string]string{}
	}
	if e.daemonIDs == nil && !e.onHostIDs() {
		return nil
	}
	return e.takeOwnIDs(ctx, b)
}

// onHostIDs reports whether the engine runs boxes on the host's own ids.
// Docker's answer may still be on its way from /info (apiProbe): it is
// waited for, as the box's ids depend on it; an /info that never
// answered counts as yes (ids of the box's own fail closed under a
// remapping daemon: the watcher cannot take them).
func (e *Engine) onHostIDs() bool {
	e.mu.Lock()
	said := e.stated
	e.mu.Unlock()
	if said == nil {
		return e.hostIDs
	}
	select {
	case <-said:
	case <-time.After(15 * time.Second):
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.statement.Present || e.statement.Detail == rootfulNoUserns
}

// boxConf is what the engine adds to a box's create request.
func (e *Engine) boxConf() boxConf {
	return boxConf{kind: e.Kind, userns: e.userns(), unbounded: !e.enforcesLimits()}
}

// enforcesLimits reports whether the engine enforces memory and pids
// limits: a rootless engine on cgroup v1 has no cgroup of its own to
// write them to.
func (e *Engine) enforcesLimits() bool {
	e.mu.Lock()
	l := e.limits
	e.mu.Unlock()
	if l != nil {
		return l.enforces()
	}
	return !e.rootless || hostCgroupUnified()
}

// Start runs `start --attach --interactive` attached, in its own
// process group (supervisor/internal/attach).
func (e *Engine) Start(ctx context.Context, b *supervisor.Box) (*supervisor.Started, error) {
	if c := e.client(ctx); c != nil {
		return e.apiStart(ctx, c, b)
	}
	return attach.Start(e.command(nil, startArgs(e.Kind, b.Name)), e.Kind, b.Name, e.Stderr)
}

// Remove removes the box; a box the engine no longer has is not an
// error. Whether the engine has the box is read from its listing on
// stdout, never from the words of a failure on stderr (which change
// between versions, and where a first run's warning can come first),
// unless a one-step run's own end proved it removed (runEnd).
// The engine's own auto-remove may be half-way when `rm --force` runs
// (docker: "removal already in progress"; rootless podman was seen
// saying "container not running"): a failed rm waits until the listing
// no longer shows the box, then tries once more.
func (e *Engine) Remove(ctx context.Context, b *supervisor.Box) (err error) {
	var run *runEnd // this process's one-step run of b (run.go), nil for none
	if e.Kind == "podman" {
		run = e.takeRun(b)
		// Once the box is gone, nothing writes its cidfile (a one-step
		// run's, also one a service that came up since did not make).
		defer run.dropDir(b)
	}
	defer func() {
		if err == nil {
			e.dropOwnIDs(b) // the box is gone: so are its processes
			e.dropLive(b)
		}
	}()
	if c := e.client(ctx); c != nil {
		return e.apiRemove(ctx, c, b)
	}
	if run.removed() {
		return nil
	}
	there, err := e.Exists(ctx, b)
	if err != nil || !there {
		return err
	}
	rm := func() error { _, err := e.run(ctx, removeArgs(e.Kind, b.Name)); return err }
	return removeRacing(ctx, b.Name, rm, func() (bool, error) { return e.Exists(ctx, b) })
}

// removeRacing removes a box whose engine may be removing it already:
// rm once; when that fails, wait until exists says the box is gone, and
// try once more.
func removeRacing(ctx context.Context, name string, rm func() error, exists func() (bool, error)) error {
	err := rm()
	if err == nil {
		return nil
	}
	for i := 0; i < 200; i++ {
		if there, xerr := exists(); xerr == nil && !there {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove box %s: %w", name, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
	if err = rm(); err == nil {
		return nil
	}
	if there, xerr := exists(); xerr == nil && !there {
		return nil
	}
	return fmt.Errorf("remove box %s: %w", name, err)
}

func (e *Engine) List(ctx context.Context, instance string) ([]supervisor.Listed, error) {
	if c := e.client(ctx); c != nil {
		return e.apiList(ctx, c, instance)
	}
	out, err := e.run(ctx, listArgs(e.Kind, instance))
	if err != nil {
		return nil, fmt.Errorf("list %s boxes: %w", e.Kind, err)
	}
	return parseList(e.Kind, out)
}

// Exists reports whether the engine still has the box, from its
// listing.
func (e *Engine) Exists(ctx context.Context, b *supervisor.Box) (bool, error) {
	if c := e.client(ctx); c != nil {
		return e.apiExists(ctx, c, b)
	}
	out, err := e.run(ctx, namedArgs(b.Name))
	if err != nil {
		return false, fmt.Errorf("look for box %s: %w", b.Name, err)
	}
	return listsName(out, b.Name), nil
}

// HostPID is the host pid of the box's PID 1 (State.Pid; 0 when the
// box does not run, or runs in a VM the engine hides).
func (e *Engine) HostPID(ctx context.Context, b *supervisor.Box) (int, error) {
	if c := e.client(ctx); c != nil {
		return e.apiHostPID(ctx, c, b)
	}
	out, err := e.run(ctx, inspectPidArgs(b.Name))
	if err != nil {
		return 0, fmt.Errorf("find the PID 1 of box %s: %w", b.Name, err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return pid, nil
}

// inspectPidArgs prints the host pid of the box's PID 1.
func inspectPidArgs(name string) []string {
	return []string{"container", "inspect", "--format", "{{.State.Pid}}", "--", name}
}

// podmanRemote reports whether podman talks to a remote service (then
// only `podman info` knows whether that service is rootless).
func (e *Engine) podmanRemote() bool {
	return envMap(e.env())["CONTAINER_HOST"] != ""
}

// env is the engine CLI's environment.
func (e *Engine) env() []string {
	if e.EngineEnv != nil {
		return e.EngineEnv
	}
	return os.Environ()
}

// Admit refuses what the engine cannot honour (supervisor.Admitter):
// limits it would ignore (CheckLimits), then mounts its daemon would
// bind from other files (CheckMounts).
func (e *Engine) Admit(ctx context.Context, b *supervisor.Box) error {
	if err := e.CheckLimits(b.Memory, b.PidsLimit); err != nil {
		return err
	}
	return e.CheckMounts(ctx, b)
}

// CheckLimits refuses limits the engine would silently ignore: a
// rootless engine on cgroup v1 has no cgroup of its own to write them
// to (Podman prints "Resource limits are not supported and ignored on
// cgroups V1 rootless systems" and runs the box without them).
func (e *Engine) CheckLimits(memory, pids int64) error {
	e.mu.Lock()
	l := e.limits
	e.mu.Unlock()
	if l != nil {
		return l.refuse(e.Kind, memory, pids)
	}
	if (memory > 0 || pids > 0) && !e.enforcesLimits() {
		return exitcode.Refused("rootless %s on cgroup v1 cannot enforce --memory or --pids-limit (it would ignore them); use a cgroup v2 host, a rootful engine with --allow-rootful, or drop the limits", e.Kind)
	}
	return nil
}

// Bounds says what a box of this engine gets by default (doctor; after
// Probe).
func (e *Engine) Bounds() []string {
	return defaultbounds.Describe(e.enforcesLimits(), e.enforcesLimits(), "rootless "+e.Kind+" on cgroup v1 cannot enforce limits (use a cgroup v2 host or a rootful engine)")
}

// CheckMounts refuses a bind source that the engine's daemon resolves
// to another file than this process does. A rootless daemon this user
// runs lives in rootlesskit's mount namespace, which holds copies of
// /etc and /run made when the daemon started: a folder made there since
// is missing for the daemon. It is asked of a daemon that listens on a
// local socket as this process's uid (the supervisor can read its root,
// /proc/PID/root); any other is left to the engine.
func (e *Engine) CheckMounts(ctx context.Context, b *supervisor.Box) error {
	c := e.client(ctx)
	if c == nil || c.ep.Scheme != "unix" {
		return nil
	}
	uid, pid, ok := c.listener()
	if !ok || pid <= 0 || uid != os.Getuid() {
		return nil
	}
	type source struct{ what, path string }
	var sources []source
	for _, m := range b.Mounts {
		sources = append(sources, source{"--mount " + m.Source + ":" + m.Target, m.Source})
	}
	if b.WatcherInImage == "" && b.WatcherPath != "" {
		sources = append(sources, source{"the watcher " + b.WatcherPath, b.WatcherPath})
	}
	for _, s := range sources {
		err := sameFileAs(pid, s.path)
		switch {
		case errors.Is(err, errNotSame):
			return exitcode.Refused("%s: the %s daemon (pid %d) does not see %s as the supervisor does (a rootless daemon keeps its own copy of /etc and /run from its start: a path made there since is not in it); put it elsewhere, such as below $HOME or /tmp, or restart the daemon", s.what, e.Kind, pid, s.path)
		case err != nil:
			e.log().Debug("mount check", "source", s.path, "daemon pid", pid, "skipped", err)
		}
	}
	return nil
}

// cgroupV2 reports whether this host runs the unified hierarchy only.
func hostCgroupUnified() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}
