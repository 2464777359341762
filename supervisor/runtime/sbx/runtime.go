package sbx

// The supervisor.Runtime over Driver, and its registration: this file
// and one import line in supervisor/cli/runtimes.go are all it takes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/internal/attach"
	"deathwatch/supervisor/mountsource"
)

// ExecUserEnv names the engine-environment variable that overrides the
// user `sbx exec` starts the watcher as (default root). A template
// whose root is not available to exec can say so; the watcher then
// refuses (exit 243) rather than run an agent it cannot confine.
const ExecUserEnv = "DEATHWATCH_SBX_EXEC_USER"

// State keys the runtime journals.
const (
	statePorts   = "sbx.ports"   // host ports with a scoped rule, "8080,9090"
	stateScratch = "sbx.scratch" // the host folder made as the workspace when no --mount was given
)

// The descriptor. Bounds: a killed supervisor's `sbx exec` client ends
// at once and the watcher in the VM sees EOF, and the agent tree dies;
// removal is reconcile's `sbx rm --force`, a VM's teardown, the slower
// of the two.
func init() {
	supervisor.Register(supervisor.Descriptor{
		Name:     Name,
		AutoRank: 0, // never picked by auto: a sandbox needs a template
		Bounds:   supervisor.Bounds{Dead: 2 * time.Second, Removed: 15 * time.Second},
		// A rule outlives its sandbox, and the scratch folder.
		Caps:         supervisor.CapUnlistedRemains | supervisor.CapHostPorts | supervisor.CapNoHostProcesses,
		ImageWatcher: DefaultWatcherPath,
		Installed: func(env []string) error {
			if _, err := bin(env); err != nil {
				return errors.New("sbx is not installed (not found on PATH)")
			}
			return nil
		},
		New: func(c supervisor.RuntimeConfig) (supervisor.Runtime, error) {
			b, err := bin(c.EngineEnv)
			if err != nil {
				b = "sbx" // Probe says it is missing
			}
			return &Runtime{cli: CLI{Bin: b, Env: c.EngineEnv}, stderr: c.Stderr, log: c.Log, env: c.EngineEnv}, nil
		},
	})
}

// bin is the sbx CLI as the engine environment's PATH finds it (the
// supervisor's own PATH when env holds none), or an error.
func bin(env []string) (string, error) {
	path, found := os.Getenv("PATH"), false
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, found = p, true
		}
	}
	if !found {
		return exec.LookPath("sbx")
	}
	name, exe := "sbx", os.FileMode(0o111)
	if runtime.GOOS == "windows" {
		name, exe = "sbx.exe", 0 // no execute bits on Windows
	}
	for _, dir := range filepath.SplitList(path) {
		f := filepath.Join(dir, name)
		if fi, err := os.Stat(f); err == nil && !fi.IsDir() && (exe == 0 || fi.Mode()&exe != 0) {
			return f, nil
		}
	}
	return "", exec.ErrNotFound
}

// Runtime is the sbx runtime.
type Runtime struct {
	cli CLI    // the watcher's exec (Start) runs it directly
	run Runner // every other call; nil: cli
	// dialect is what Probe learnt of the CLI (nil before it ran).
	dialect *Dialect
	stderr  io.Writer
	log     *slog.Logger
	env     []string
}

func (r *Runtime) driver(watcher string) *Driver {
	if r.run != nil {
		return &Driver{Run: r.run, Watcher: watcher}
	}
	return &Driver{Run: r.cli, Watcher: watcher}
}

// Name implements supervisor.Runtime.
func (r *Runtime) Name() string { return Name }

// Probe is Driver.Preflight: the CLI's version, the daemon and the
// sign-in (sbx ls), the default network policy (sbx policy ls) and
// whether rules can be scoped to one sandbox; doctor prints the detail.
func (r *Runtime) Probe(ctx context.Context) (supervisor.Info, error) {
	info := supervisor.Info{Runtime: Name}
	dl, err := r.driver("").Preflight(ctx, false)
	info.Version = dl.Version
	if err != nil {
		info.Detail = err.Error()
		return info, exitcode.Engine("%w", err)
	}
	r.dialect = &dl
	// A microVM: the boundary is a hypervisor, not a shared root.
	info.Present, info.Rootless = true, true
	info.Detail = dialectDetail(dl)
	return info, nil
}

// dialectDetail says what this CLI lets the runtime do, for doctor.
func dialectDetail(dl Dialect) string {
	d := "signed in, default network policy set; "
	if dl.Scoped {
		d += "--host-port: one rule scoped to the sandbox"
	} else {
		d += "--host-port refused: this sbx's network rules apply to every sandbox (no --sandbox)"
	}
	if dl.Wide {
		d += "; rules read with sbx policy ls --wide"
	}
	return d
}

// Prepare refuses what a sandbox cannot honour before anything exists,
// names the sandbox (the name is all it carries: instance and launch
// id), and journals the ports and scratch folder from the start.
func (r *Runtime) Prepare(ctx context.Context, b *supervisor.Box) error {
	network := ""
	if b.NetworkSet {
		network = b.Network
		if network == "none" {
			network = "" // the sandbox's own egress is the proxy's; none asks for nothing more
		}
	}
	if err := CheckOptions(network, "", b.HostPorts); err != nil {
		return exitcode.Refused("%w", err)
	}
	if b.Image == "" {
		return exitcode.Usage("--runtime sbx needs --template (a template loaded with sbx template load)")
	}
	name, err := SandboxName(b.Labels[shared.LabelInstance], b.LaunchID)
	if err != nil {
		return exitcode.Usage("sbx: %w", err)
	}
	b.Name = name
	mounts := bridgeMounts(b.Mounts)
	if len(mounts) == 0 {
		b.State[stateScratch] = scratchDir(name)
		mounts = []Mount{{Source: b.State[stateScratch], Target: b.State[stateScratch]}}
	}
	if _, links, err := Bridge(mounts); err != nil {
		return exitcode.Usage("%w", err)
	} else {
		b.Links = links
	}
	if len(b.HostPorts) > 0 {
		dl := r.dialect
		if dl == nil {
			d, err := r.driver("").Preflight(ctx, false)
			if err != nil {
				return exitcode.Engine("%w", err)
			}
			dl = &d
		}
		if !dl.Scoped {
			return exitcode.Refused("%w", ErrNoScope)
		}
		b.State[statePorts] = joinPorts(b.HostPorts)
	}
	return nil
}

func bridgeMounts(ms []supervisor.Mount) []Mount {
	var out []Mount
	for _, m := range ms {
		out = append(out, Mount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	return out
}

// scratchDir is the host folder that is the workspace of a sandbox
// made without --mount (sbx create takes at least one).
func scratchDir(name string) string { return filepath.Join(os.TempDir(), "deathwatch-sbx-"+name) }

// Admit refuses what a sandbox cannot honour (supervisor.Admitter): its
// limits (CheckLimits).
func (r *Runtime) Admit(_ context.Context, b *supervisor.Box) error {
	return r.CheckLimits(b.Memory, b.PidsLimit)
}

// CheckLimits refuses a pids limit: sbx sets none on a sandbox, and a
// limit that would be silently ignored is refused. Memory is --memory.
func (r *Runtime) CheckLimits(_, pids int64) error {
	if pids > 0 {
		return exitcode.Refused("sbx: --pids-limit cannot be honoured: sbx sets no process limit on a sandbox; drop it (the microVM is the boundary)")
	}
	return nil
}

// Create makes the sandbox, its nonce, the watcher check and the rules.
func (r *Runtime) Create(ctx context.Context, b *supervisor.Box) error {
	if err := mountsource.Check(b.Mounts); err != nil {
		return err
	}
	if d := b.State[stateScratch]; d != "" {
		if err := os.Mkdir(d, 0o700); err != nil {
			return exitcode.Setup("make the scratch workspace of %s: %w", b.Name, err)
		}
	}
	mounts := bridgeMounts(b.Mounts)
	if d := b.State[stateScratch]; d != "" {
		mounts = []Mount{{Source: d, Target: d}}
	}
	ws, _, err := Bridge(mounts)
	if err != nil {
		return exitcode.Usage("%w", err)
	}
	c := CreateConfig{Name: b.Name, Template: b.Image, Memory: memoryBound(b.Memory), Workspaces: ws}
	if err := r.driver(b.WatcherInImage).Create(ctx, c, b.Nonce, b.HostPorts); err != nil {
		if errors.Is(err, ErrNoTemplate) {
			return exitcode.Image("%w", err)
		}
		return exitcode.Setup("%w", err)
	}
	return nil
}

// Start runs the template's watcher under `sbx exec -i` with the
// control stream on its stdin and stdout.
func (r *Runtime) Start(ctx context.Context, b *supervisor.Box) (*supervisor.Started, error) {
	watcher := b.WatcherInImage
	if watcher == "" {
		watcher = DefaultWatcherPath
	}
	args := execArgs(b.Name, watcher)
	if u := r.execUser(); u != ExecUser {
		args = withUser(args, u)
	}
	c := exec.Command(r.cli.Bin, args...)
	c.Env = r.cli.Env
	return attach.Start(c, Name, b.Name, r.stderr)
}

func (r *Runtime) execUser() string {
	env := r.env
	if env == nil {
		env = os.Environ()
	}
	for _, kv := range env {
		if u, ok := strings.CutPrefix(kv, ExecUserEnv+"="); ok && u != "" {
			return u
		}
	}
	return ExecUser
}

// withUser is args with the value of -u replaced.
func withUser(args []string, user string) []string {
	out := append([]string(nil), args...)
	for i := range out[:len(out)-1] {
		if out[i] == "-u" {
			out[i+1] = user
			break
		}
	}
	return out
}

// Remove removes the sandbox's rules (journaled, and any the listing
// shows scoped to it), the sandbox, and the scratch folder.
func (r *Runtime) Remove(ctx context.Context, b *supervisor.Box) error {
	d := r.driver("")
	ports := splitPorts(b.State[statePorts])
	if scoped, err := d.ScopedPorts(ctx, b.Name); err == nil {
		ports = unionPorts(ports, scoped)
	}
	if err := d.Remove(ctx, b.Name, ports); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", b.Name, err)
	}
	if s := b.State[stateScratch]; s != "" && s == scratchDir(b.Name) {
		if err := os.RemoveAll(s); err != nil {
			return fmt.Errorf("remove the scratch workspace of %s: %w", b.Name, err)
		}
	}
	return nil
}

// List returns the sandboxes named for instance, with the labels their
// names carry (the nonce is inside: ReadNonce).
func (r *Runtime) List(ctx context.Context, instance string) ([]supervisor.Listed, error) {
	all, err := r.driver("").List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []supervisor.Listed
	for _, s := range all {
		inst, launchID, ok := ParseSandboxName(s.Name)
		if !ok || inst != instance {
			continue
		}
		out = append(out, supervisor.Listed{Name: s.Name, Running: s.Running(), Labels: map[string]string{
			shared.LabelManaged: "true", shared.LabelInstance: inst, shared.LabelLaunchID: launchID,
		}})
	}
	return out, nil
}

// Exists reports whether sbx ls shows the sandbox.
func (r *Runtime) Exists(ctx context.Context, b *supervisor.Box) (bool, error) {
	all, err := r.driver("").List(ctx)
	if err != nil {
		return false, err
	}
	for _, s := range all {
		if s.Name == b.Name {
			return true, nil
		}
	}
	return false, nil
}

// HostPID is 0: the watcher runs in a microVM.
func (r *Runtime) HostPID(context.Context, *supervisor.Box) (int, error) { return 0, nil }

// ReadNonce reads the nonce from inside the sandbox (reconcile). The
// CLI documents no label or listing field that could carry it, so a
// stopped sandbox is booted to read it (exec starts it first): reconcile
// asks only for sandboxes an open journal entry of its instance names.
func (r *Runtime) ReadNonce(ctx context.Context, b *supervisor.Box) (string, error) {
	return r.driver("").ReadNonce(ctx, b.Name)
}

// CountProcesses counts the processes in the sandbox whose environment
// holds env (prove-deathwatch: the host cannot see a VM's processes).
func (r *Runtime) CountProcesses(ctx context.Context, b *supervisor.Box, env string) (int, error) {
	out, err := r.driver("").Run.Run(ctx, CountArgs(b.Name, env), nil)
	if err != nil {
		return 0, err
	}
	return ParseCount(string(out))
}

func joinPorts(ps []int) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

func splitPorts(s string) []int {
	var ps []int
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 && n < 65536 {
			ps = append(ps, n)
		}
	}
	return ps
}

func unionPorts(a, b []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, p := range append(append([]int(nil), a...), b...) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Ints(out)
	return out
}

var (
	_ supervisor.Preparer = (*Runtime)(nil)
	_ supervisor.Admitter = (*Runtime)(nil)
)

// memoryBound is the sandbox's memory (sbx create --memory): what the
// box asks for, else supervisor.DefaultMemory, as on every runtime that
// can bound a box's memory.
func memoryBound(asked int64) int64 {
	if asked > 0 {
		return asked
	}
	return supervisor.DefaultMemory
}

// Bounds says what a sandbox gets by default (doctor): the microVM's
// memory, no process bound, and what the watcher makes of its root.
func (r *Runtime) Bounds() []string {
	return []string{
		fmt.Sprintf("memory %d MiB, the microVM's (--memory)", supervisor.DefaultMemory>>20),
		"no pids bound: sbx sets none on a sandbox; --pids-limit is refused",
		"root read-only to the agent where the VM's kernel has Landlock ABI 3 (Linux 6.2): it writes only in /tmp, /dev/shm and its workspaces (--read-write-root lifts that)",
		"/tmp and /dev/shm are the VM's own, bounded only by the VM's disk and memory",
	}
}

// Walls says what a sandbox's walls leave to the microVM, which sbx
// does not let the supervisor set (doctor).
func (r *Runtime) Walls() []string {
	return []string{
		"the boundary is the microVM: the box's syscall filter, keyring and Landlock layer are the watcher's, inside the VM's own kernel (doctor's Landlock line is this host's kernel, not the VM's; --require-landlock asks the VM's)",
		"sbx takes no process limit and no size for the VM's /tmp or /dev/shm: the VM's memory (--memory, 4 GiB by default) and disk bound them",
		"the host is reached through sbx's network policy proxy only: --host-port opens one loopback port to this sandbox, --network is refused",
	}
}

// Writable is the scratch workspace of a sandbox made without --mount:
// the agent's one folder of the host's, writable like a --mount.
func (r *Runtime) Writable(b *supervisor.Box) []string {
	if d := b.State[stateScratch]; d != "" {
		return []string{d}
	}
	return nil
}
