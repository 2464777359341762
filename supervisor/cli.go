package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"deathwatch/shared"
)

// Globals are the flags every command takes.
type Globals struct {
	Instance string `help:"Controller instance: boxes and journal entries carry it, ls and reconcile see only their own." env:"DEATHWATCH_INSTANCE" default:"default"`
	Journal  string `help:"Journal directory (default /var/lib/deathwatch for root, else $XDG_STATE_HOME/deathwatch)." env:"DEATHWATCH_JOURNAL" placeholder:"DIR"`
	LogLevel string `help:"Log level of the supervisor's own messages on stderr." enum:"debug,info,warn,error" default:"warn"`
}

// CLI is the supervisor's command line.
type CLI struct {
	Globals

	Exec ExecCmd `cmd:"" help:"Run one agent command in a fresh box and exit with its status."`
	Ls   LsCmd   `cmd:"" help:"List this instance's boxes (journal and runtime)."`

	Reconcile       ReconcileCmd `cmd:"" help:"Remove this instance's leftovers that it can prove it owns; report the rest (exit 247)."`
	ProveDeathwatch ProveCmd     `cmd:"" name:"prove-deathwatch" help:"Kill a stand-in controller and measure how fast its box dies and is removed."`
	Doctor          DoctorCmd    `cmd:"" help:"Report runtimes, rootless/rootful, cgroups, the watcher, the staging probe and the proof."`
	Demo            DemoCmd      `cmd:"" help:"Show the promise on this host: an agent in a native box, then a SIGKILLed controller and how long its box survived."`
	Version         VersionCmd   `cmd:"" help:"Print the version."`
}

// ExecCmd is `supervisor exec`.
type ExecCmd struct {
	Runtime        string        `help:"Runtime that makes the box: ${runtimes_list}, or auto (${auto_help})." enum:"${runtimes},auto" default:"auto" env:"DEATHWATCH_RUNTIME"`
	Image          string        `help:"Image to run (docker/podman: never pulled; native: rootfs directory)." env:"DEATHWATCH_IMAGE"`
	Name           string        `help:"Prefix of the box name; the launch id follows it." default:"dw" placeholder:"PREFIX"`
	Label          []string      `help:"Extra label KEY=VALUE on the box (repeatable; io.deathwatch.* is reserved)." sep:"none" placeholder:"KEY=VALUE"`
	RunKey         string        `help:"The controller's run this box belongs to (a label, and in the journal)."`
	Env            []string      `help:"Pass NAME to the agent, its value taken from the supervisor's environment (repeatable). Values travel only inside the control stream." sep:"none" placeholder:"NAME"`
	EnvFile        []string      `help:"Read NAME=VALUE lines for the agent from FILE (repeatable; # comments)." sep:"none" placeholder:"FILE"`
	Workdir        string        `help:"Working directory of the agent (absolute)." placeholder:"DIR"`
	Mount          []string      `help:"Bind mount SRC:DST[:ro] (repeatable; absolute paths)." sep:"none" placeholder:"SRC:DST[:ro]"`
	Memory         string        `help:"Memory limit, e.g. 512m or 2g (no swap beyond it)." placeholder:"SIZE"`
	PidsLimit      int64         `help:"Maximum number of processes in the box." placeholder:"N"`
	Network        string        `help:"Network: none, bridge or host." enum:"none,bridge,host" default:"none"`
	Deadline       time.Duration `help:"Stop the agent this long after it started (0 = no deadline); exit status 246." default:"0s"`
	Grace          time.Duration `help:"TERM-to-KILL grace for the deadline, for stop on SIGINT/SIGTERM and for the final sweep." default:"2s"`
	Heartbeat      time.Duration `help:"The watcher kills the box when the supervisor is silent this long (0 = only EOF counts); pings go every third of it." default:"0s"`
	Events         string        `help:"Write line-delimited JSON lifecycle events (journaled, created, started, ready, exited, removed) to FILE or fd:N." placeholder:"FILE|fd:N"`
	AllowRootful   bool          `help:"Accept a rootful engine (a box escape is root on the host)."`
	Watcher        string        `help:"Host watcher binary to bind-mount read-only as the box's entrypoint (default: watcher next to the supervisor, then PATH)." placeholder:"PATH"`
	WatcherInImage string        `help:"Use the watcher baked into the image at PATH instead of bind-mounting one." placeholder:"PATH"`
	User           string        `help:"UID:GID the agent runs as (0 is refused)." default:"1000:1000" placeholder:"UID:GID"`

	Command []string `arg:"" name:"cmd" passthrough:"partial" help:"The agent command and its arguments (after --)." placeholder:"CMD ARGS"`
}

// Help is the long help of exec.
func (ExecCmd) Help() string {
	var b strings.Builder
	b.WriteString(`Runs CMD as the agent of a fresh box whose PID 1 is the watcher, relays its output,
and exits with its status. The box is removed on every path; if the supervisor is
killed, the watcher sees its control stream end and kills the box.

Signals: the first SIGINT, SIGTERM or SIGHUP stops the agent (TERM, --grace,
KILL); a second one ends the box at once. SIGUSR1 and SIGUSR2 go to the agent.

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

// LsCmd is `supervisor ls`.
type LsCmd struct {
	JSON bool `help:"Print JSON." name:"json"`
	All  bool `help:"Include closed (removed) journal entries."`
}

// VersionCmd is `supervisor version`.
type VersionCmd struct {
	JSON bool `help:"Print JSON." name:"json"`
}

// cmdContext carries the seams and the result through kong's Run.
type cmdContext struct {
	stdout, stderr io.Writer
	signals        <-chan os.Signal
	env            []string // nil: os.Environ()
	getenv         func(string) (string, bool)
	self           string // the supervisor's own path (for the default watcher)
	code           int
}

type kongExit struct{ code int }

// Main runs the supervisor with args (without the program name) and
// returns its exit status.
func Main(args []string) int {
	if initMain, ok := InitMode(args); ok { // a runtime's hidden mode (native: the box's init stage)
		return initMain()
	}
	self, _ := os.Executable()
	return run(args, &cmdContext{stdout: os.Stdout, stderr: os.Stderr, getenv: os.LookupEnv, self: self})
}

func newParser(cli *CLI, c *cmdContext) (*kong.Kong, error) {
	return kong.New(cli,
		kong.Name("supervisor"),
		kong.Description("deathwatch supervisor: runs agent commands in boxes that die with it."),
		kong.Writers(c.stdout, c.stderr),
		kong.Exit(func(code int) { panic(kongExit{code}) }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		runtimeVars(),
	)
}

// runtimeVars are the kong variables that spell the registered
// runtimes: ${runtimes} (an enum), ${runtimes_list} (for help text),
// ${auto_help} (what auto picks) and ${auto_order}.
func runtimeVars() kong.Vars {
	names := RuntimeNames()
	list := strings.Join(names, ", ")
	if len(names) == 0 {
		list = "none"
	}
	return kong.Vars{
		"runtimes":      strings.Join(names, ","),
		"runtimes_list": list,
		"auto_help":     AutoHelp(),
		"auto_order":    strings.Join(AutoOrder(), ", then "),
		"default_prove": LocalRuntime(),
		"remove_bounds": removeBounds(),
	}
}

// removeBounds lists the runtimes' default removal bounds for help.
func removeBounds() string {
	var parts []string
	for _, d := range Descriptors() {
		parts = append(parts, d.Name+" "+d.Bounds.Removed.String())
	}
	return strings.Join(parts, ", ")
}

func run(args []string, c *cmdContext) (code int) {
	var cli CLI
	p, err := newParser(&cli, c)
	if err != nil {
		fmt.Fprintf(c.stderr, "supervisor: internal error: %v\n", err)
		return shared.ExitSetupFailed
	}
	defer func() {
		if r := recover(); r != nil {
			if ke, ok := r.(kongExit); ok {
				code = ke.code
				if code != 0 {
					code = shared.ExitUsage
				}
				return
			}
			panic(r)
		}
	}()
	kctx, err := p.Parse(args)
	if err != nil {
		hint := "supervisor --help"
		commands := map[string]bool{}
		for _, n := range p.Model.Children {
			commands[n.Name] = true
		}
		for _, a := range args {
			if commands[a] {
				hint = "supervisor " + a + " --help"
				break
			}
		}
		fmt.Fprintf(c.stderr, "supervisor: %v (see %s)\n", err, hint)
		return shared.ExitUsage
	}
	if err := kctx.Run(&cli.Globals, c); err != nil {
		fmt.Fprintf(c.stderr, "supervisor: %v\n", err)
		return exitCode(err, shared.ExitSetupFailed)
	}
	return c.code
}

func (g *Globals) logger(w io.Writer) *slog.Logger {
	var lv slog.Level
	lv.UnmarshalText([]byte(g.LogLevel))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lv}))
}

func (g *Globals) journalDir() string {
	if g.Journal != "" {
		return g.Journal
	}
	return DefaultJournalDir()
}

// Run is `supervisor exec`.
func (e *ExecCmd) Run(g *Globals, c *cmdContext) error {
	o, err := e.options(g, c)
	if err != nil {
		return err
	}
	ev, err := OpenEvents(e.Events)
	if err != nil {
		return err
	}
	defer ev.Close()
	sigs := c.signals
	if sigs == nil {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
		defer signal.Stop(ch)
		// A closed stdout must not kill the supervisor before it
		// removes the box: take SIGPIPE as an error return instead.
		pipe := make(chan os.Signal, 1)
		signal.Notify(pipe, syscall.SIGPIPE)
		defer signal.Stop(pipe)
		sigs = ch
	}
	env := c.env
	if env == nil {
		env = os.Environ()
	}
	c.code = Exec(context.Background(), o, &ExecIO{
		Stdout: c.stdout, Stderr: c.stderr, Log: g.logger(c.stderr), Events: ev, Signals: sigs,
		EngineEnv: engineEnv(env, e.Env),
	})
	return nil
}

// options turns the flags into ExecOptions, refusing what is bad before
// anything exists.
func (e *ExecCmd) options(g *Globals, c *cmdContext) (*ExecOptions, error) {
	o := &ExecOptions{
		Instance: g.Instance, JournalDir: g.journalDir(), Runtime: e.Runtime, Image: e.Image,
		NamePrefix: e.Name, RunKey: e.RunKey, Workdir: e.Workdir, PidsLimit: e.PidsLimit,
		Network: e.Network, Deadline: e.Deadline, Grace: e.Grace, Heartbeat: e.Heartbeat,
		AllowRootful: e.AllowRootful, WatcherInImage: e.WatcherInImage, Argv: e.Command,
	}
	// kong keeps the "--" that ends the flags in a partial passthrough.
	if len(o.Argv) > 0 && o.Argv[0] == "--" {
		o.Argv = o.Argv[1:]
	}
	if !ValidName(g.Instance) {
		return nil, UsageError("--instance %q: use letters, digits, '_', '.', '-' (at most 128)", g.Instance)
	}
	if !ValidName(e.Name) || len(e.Name) > 40 {
		return nil, UsageError("--name %q: use letters, digits, '_', '.', '-' (at most 40)", e.Name)
	}
	if e.RunKey != "" && (strings.ContainsAny(e.RunKey, "\n\x00,") || len(e.RunKey) > 256) {
		return nil, UsageError("--run-key: no newline, NUL or comma, at most 256 bytes")
	}
	if len(o.Argv) == 0 {
		return nil, UsageError("name the agent command after --, e.g. supervisor exec --image IMAGE -- echo hi")
	}
	if e.Deadline < 0 || e.Grace < 0 || e.Heartbeat < 0 {
		return nil, UsageError("--deadline, --grace and --heartbeat must not be negative")
	}
	if e.Heartbeat > 0 && e.Heartbeat < 30*time.Millisecond {
		return nil, UsageError("--heartbeat %s is too short (at least 30ms)", e.Heartbeat)
	}
	if e.PidsLimit < 0 {
		return nil, UsageError("--pids-limit must not be negative")
	}
	var err error
	if o.Labels, err = parseLabels(e.Label); err != nil {
		return nil, err
	}
	if o.AgentEnv, err = resolveEnv(e.Env, e.EnvFile, c.getenv); err != nil {
		return nil, err
	}
	if o.Mounts, err = parseMounts(e.Mount); err != nil {
		return nil, err
	}
	if e.Memory != "" {
		if o.Memory, err = parseSize(e.Memory); err != nil {
			return nil, UsageError("--memory %q: %v", e.Memory, err)
		}
	}
	if o.UID, o.GID, err = parseUser(e.User); err != nil {
		return nil, UsageError("--user %q: %v", e.User, err)
	}
	if e.Workdir != "" && (!filepath.IsAbs(e.Workdir) || filepath.Clean(e.Workdir) != e.Workdir) {
		return nil, UsageError("--workdir %q: want a clean absolute path", e.Workdir)
	}
	if e.WatcherInImage != "" && !filepath.IsAbs(e.WatcherInImage) {
		return nil, UsageError("--watcher-in-image %q: want an absolute path inside the image", e.WatcherInImage)
	}
	if e.WatcherInImage == "" {
		if o.WatcherPath, err = findWatcher(e.Watcher, c.self); err != nil && !hostWatcherOnly(e.Runtime) {
			return nil, err
		}
	}
	return o, nil
}

// hostWatcherOnly: the runtime puts the host's watcher into the box
// itself and reports a missing one when it creates the box.
func hostWatcherOnly(runtime string) bool {
	d, _ := Lookup(runtime)
	return d.HostWatcherOnly
}

// findWatcher resolves --watcher: the flag, else `watcher` next to the
// supervisor's own binary, else on PATH.
func findWatcher(flag, self string) (string, error) {
	check := func(p string) (string, error) {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		st, err := os.Stat(abs)
		if err != nil {
			return "", err
		}
		if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not an executable file", abs)
		}
		return abs, nil
	}
	if flag != "" {
		p, err := check(flag)
		if err != nil {
			return "", UsageError("--watcher: %v", err)
		}
		return p, nil
	}
	if self != "" {
		if p, err := check(filepath.Join(filepath.Dir(self), "watcher")); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("watcher"); err == nil {
		if p, err := check(p); err == nil {
			return p, nil
		}
	}
	return "", UsageError("no watcher binary: put `watcher` next to the supervisor or on PATH, or pass --watcher PATH or --watcher-in-image PATH")
}

func parseLabels(in []string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range in {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			return nil, UsageError("--label %q: want KEY=VALUE", kv)
		case strings.HasPrefix(k, shared.LabelPrefix):
			return nil, UsageError("--label %q: %s* labels are reserved for deathwatch", kv, shared.LabelPrefix)
		case strings.ContainsAny(kv, "\n\x00"):
			return nil, UsageError("--label %q: no newline or NUL", k)
		}
		m[k] = v
	}
	return m, nil
}

var envNameOK = func(n string) bool {
	if n == "" {
		return false
	}
	for i, c := range n {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// resolveEnv builds the agent's NAME=value list. Error messages name
// variables, never values.
func resolveEnv(names, files []string, getenv func(string) (string, bool)) ([]string, error) {
	var out []string
	seen := map[string]int{}
	add := func(name, val string) {
		if i, ok := seen[name]; ok {
			out[i] = name + "=" + val
			return
		}
		seen[name] = len(out)
		out = append(out, name+"="+val)
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, UsageError("--env-file: %v", err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), shared.MaxStringLen+1024)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, val, ok := strings.Cut(line, "=")
			name = strings.TrimPrefix(strings.TrimSpace(name), "export ")
			if !ok || !envNameOK(name) {
				fh.Close()
				return nil, UsageError("--env-file %s line %d: want NAME=VALUE", f, n)
			}
			add(name, val)
		}
		err = sc.Err()
		fh.Close()
		if err != nil {
			return nil, UsageError("--env-file %s: %v", f, err)
		}
	}
	for _, name := range names {
		if strings.Contains(name, "=") {
			n, _, _ := strings.Cut(name, "=")
			return nil, UsageError("--env %s=…: pass only the NAME; its value comes from the supervisor's environment (a value in argv is visible to every process on the host)", n)
		}
		if !envNameOK(name) {
			return nil, UsageError("--env %q: not a variable name", name)
		}
		v, ok := getenv(name)
		if !ok {
			return nil, UsageError("--env %s: %s is not set in the supervisor's environment", name, name)
		}
		add(name, v)
	}
	return out, nil
}

func parseMounts(in []string) ([]Mount, error) {
	var ms []Mount
	for _, s := range in {
		parts := strings.Split(s, ":")
		m := Mount{}
		switch {
		case len(parts) == 2:
		case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
			m.ReadOnly = parts[2] == "ro"
		default:
			return nil, UsageError("--mount %q: want SRC:DST or SRC:DST:ro (no ':' inside paths)", s)
		}
		m.Source, m.Target = parts[0], parts[1]
		for _, p := range []string{m.Source, m.Target} {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, ",\n\x00") {
				return nil, UsageError("--mount %q: %q is not a clean absolute path", s, p)
			}
		}
		if _, err := os.Stat(m.Source); err != nil {
			return nil, UsageError("--mount %q: %v", s, err)
		}
		if m.Target == "/" || m.Target == WatcherMountPoint || strings.HasPrefix(m.Target, "/dw/") || m.Target == "/dw" {
			return nil, UsageError("--mount %q: %s is reserved", s, m.Target)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// parseSize reads 1048576, 512k, 512m, 2g (binary units, like docker).
func parseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "b")
	t = strings.TrimSuffix(t, "i")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("want a positive size like 512m or 2g")
	}
	if n > (1<<62)/mult {
		return 0, errors.New("too large")
	}
	n *= mult
	if n < 6<<20 {
		return 0, errors.New("at least 6m (engines refuse less)")
	}
	return n, nil
}

func parseUser(s string) (uint32, uint32, error) {
	u, gs, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, errors.New("want UID:GID (numbers)")
	}
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(gs, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, errors.New("want UID:GID (numbers)")
	}
	return uint32(uid), uint32(gid), nil
}

// Run is `supervisor version`.
func (v *VersionCmd) Run(c *cmdContext) error {
	if v.JSON {
		fmt.Fprintf(c.stdout, `{"version":%q,"protocol":%d,"go":%q}`+"\n", shared.Version, shared.ProtocolVersion, runtime.Version())
		return nil
	}
	fmt.Fprintf(c.stdout, "supervisor %s (protocol %d, %s)\n", shared.Version, shared.ProtocolVersion, runtime.Version())
	return nil
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
