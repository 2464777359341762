package sbx

// Driver is the sequences of sbx calls the runtime makes, behind one
// small seam (Runner), so that they are driven by a scripted fake in
// the unit tests and by the kernel tests' emulator with the same code.
// The Runtime methods (once the registry lands) are thin over it; the
// watcher's own exec (execArgs) is started by the runtime's Start, which
// owns the pipes and the process group.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Runner runs `sbx args...` with stdin (nil: none) and returns its
// stdout; a failure's error carries what the CLI said on stderr.
type Runner interface {
	Run(ctx context.Context, args []string, stdin io.Reader) ([]byte, error)
}

// CLI runs the sbx binary, each call bounded by callTimeout.
type CLI struct {
	Bin string   // default "sbx", looked up on PATH
	Env []string // nil: the supervisor's own (never the agent's)
	// Timeout overrides callTimeout for every call (0: callTimeout).
	Timeout time.Duration
}

// ErrTimeout is an sbx call that did not answer within its bound.
var ErrTimeout = errors.New("no answer in time")

// Run implements Runner. Its stdin is empty unless given, so a prompt
// of the CLI (the daemon's first-start policy choice) reads EOF rather
// than waiting for a person.
func (c CLI) Run(ctx context.Context, args []string, stdin io.Reader) ([]byte, error) {
	bin := c.Bin
	if bin == "" {
		bin = "sbx"
	}
	limit := c.Timeout
	if limit <= 0 {
		limit = callTimeout(args)
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = c.Env
	cmd.Stdin = stdin
	// A child of the CLI that keeps its output open must not keep the
	// call from returning once it is killed.
	cmd.WaitDelay = 2 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return out, fmt.Errorf("sbx is not installed (%s not found on PATH); Docker Sandboxes need it", bin)
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return out, fmt.Errorf("sbx %s: %w within %s: the sandbox daemon may be wedged; check that `sbx ls` answers (`sbx daemon restart` restarts it)", verb(args), ErrTimeout, limit)
		}
		return out, fmt.Errorf("sbx %s: %w: %s", verb(args), err, errorLine(stderr.String()))
	}
	return out, nil
}

// callTimeout is the bound of one sbx call, sized to what it does:
// the CLI's own answers and listings are quick; create makes a VM (and
// may pull its template); exec and rm may boot or tear one down (exec
// of a stopped sandbox starts it first); a template load copies an
// image. The watcher's own exec is not a call: its bound is the run's.
func callTimeout(args []string) time.Duration {
	w := strings.Fields(verb(args))
	if len(w) > 2 {
		w = w[:2]
	}
	switch strings.Join(w, " ") {
	case "version":
		return 15 * time.Second
	case "create":
		return 5 * time.Minute
	case "exec", "rm", "stop":
		return 2 * time.Minute
	case "template load":
		return 10 * time.Minute
	}
	return 30 * time.Second // ls, policy, template ls, help
}

// errorLine is what an error quotes of the CLI's stderr, on one line:
// its last line that says error (a prompt or progress before it is
// not the cause), else all of it joined.
func errorLine(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(strings.ToLower(lines[i]), "error") {
			return truncate(strings.TrimSpace(lines[i]), 400)
		}
	}
	return truncate(strings.Join(strings.Fields(stderr), " "), 400)
}

// verb is the argv's command words, for messages (never its values).
func verb(args []string) string {
	var w []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") || len(w) == 3 {
			break
		}
		w = append(w, a)
	}
	return strings.Join(w, " ")
}

// Driver drives sbx for one supervisor.
type Driver struct {
	Run     Runner
	Watcher string // the watcher's path in the template; "" = DefaultWatcherPath
}

func (d *Driver) watcher() string {
	if d.Watcher == "" {
		return DefaultWatcherPath
	}
	return d.Watcher
}

// ErrNoScope is the refusal when the CLI cannot scope a rule to one
// sandbox and host ports were asked for.
var ErrNoScope = errors.New("sbx: this sbx cannot scope a network rule to one sandbox (`sbx policy allow network --help` offers no --sandbox: its rules apply to every sandbox on the machine); refusing --host-port rather than widening the machine's global policy")

// Dialect is what Preflight learnt of the CLI it faces.
type Dialect struct {
	Version string // the first line of `sbx version`
	// Scoped: `policy allow network` takes --sandbox, so a host port
	// is granted to one sandbox; without it --host-port is refused.
	Scoped bool
	// Wide: `policy ls` prints a summary per policy and the rules only
	// with --wide.
	Wide bool
}

// Preflight is the start-up fail-fast, each step one clear line of what
// to run: `sbx version` answers; `sbx ls` answers (the daemon runs and
// the user is signed in); `sbx policy ls` answers with a listing this
// runtime reads (a default network policy is chosen); and whether rules
// can be scoped to one sandbox. With wantPorts, a CLI that cannot scope
// them is ErrNoScope.
func (d *Driver) Preflight(ctx context.Context, wantPorts bool) (Dialect, error) {
	var dl Dialect
	out, err := d.Run.Run(ctx, versionArgs(), nil)
	if err != nil {
		return dl, err
	}
	dl.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if _, err := d.List(ctx); err != nil {
		return dl, firstUse(err)
	}
	if _, wide, err := d.rules(ctx); err != nil {
		return dl, firstUse(err)
	} else {
		dl.Wide = wide
	}
	help, err := d.Run.Run(ctx, policyHelpArgs(), nil)
	if err != nil {
		return dl, err
	}
	dl.Scoped = policyScopeSupported(string(help))
	if wantPorts && !dl.Scoped {
		return dl, ErrNoScope
	}
	return dl, nil
}

// firstUse adds what to run to an error of a CLI that was never set up:
// not signed in, or no default network policy chosen (the daemon's
// first-start prompt, which a call without a terminal cannot answer).
func firstUse(err error) error {
	msg := strings.ToLower(err.Error())
	switch {
	case errors.Is(err, ErrTimeout):
		return err
	case strings.Contains(msg, "sbx login") || strings.Contains(msg, "not signed in") || strings.Contains(msg, "not logged in"):
		return fmt.Errorf("%w; sign in once with `sbx login`", err)
	case strings.Contains(msg, "set-default") || strings.Contains(msg, "policy init") || strings.Contains(msg, "network policy"):
		return fmt.Errorf("%w; choose the default network policy once with `sbx policy set-default balanced` (`sbx policy init balanced` where the CLI has init)", err)
	}
	return err
}

// rules lists every rule `sbx policy ls` shows, with --wide when this
// CLI prints only a summary without it (wide says so). A listing it
// cannot read is an error, never an empty list.
func (d *Driver) rules(ctx context.Context) (rules []PolicyRule, wide bool, err error) {
	out, err := d.Run.Run(ctx, policyLsArgs(false), nil)
	if err != nil {
		return nil, false, err
	}
	rules, err = parsePolicyList(string(out))
	if !errors.Is(err, errPolicySummary) {
		return rules, false, err
	}
	if out, err = d.Run.Run(ctx, policyLsArgs(true), nil); err != nil {
		return nil, true, err
	}
	rules, err = parsePolicyList(string(out))
	if errors.Is(err, errPolicySummary) {
		err = errors.New("read sbx policy ls --wide: it printed the summary again, no rules")
	}
	return rules, true, err
}

// List returns every sandbox `sbx ls` shows (JSON preferred, the table
// when this CLI has no --json).
func (d *Driver) List(ctx context.Context) ([]Sandbox, error) {
	out, err := d.Run.Run(ctx, lsArgs(true), nil)
	if errors.Is(err, ErrTimeout) {
		return nil, err // a wedged daemon answers the table no sooner
	}
	if err != nil {
		var err2 error
		if out, err2 = d.Run.Run(ctx, lsArgs(false), nil); err2 != nil {
			return nil, err
		}
	}
	return parseSandboxList(out)
}

// ErrNoTemplate is a create that failed because the template is
// missing (the caller exits 242, image not found).
var ErrNoTemplate = errors.New("template not found")

// Create makes the sandbox and everything it needs before the watcher
// starts: the nonce inside it, a check that the template carries the
// watcher, one sandbox-scoped rule per host port. It stops at the first
// failure; the caller removes the sandbox (Remove) on every path, as it
// would after any other failed create. A create that failed while
// `sbx template ls` does not list the template wraps ErrNoTemplate.
func (d *Driver) Create(ctx context.Context, c CreateConfig, nonce string, ports []int) error {
	if _, err := d.Run.Run(ctx, createArgs(c), nil); err != nil {
		if d.templateMissing(ctx, c.Template) {
			return fmt.Errorf("create sandbox %s: %w: %s is not a loaded template (docker image save %s -o t.tar && sbx template load t.tar): %w", c.Name, ErrNoTemplate, c.Template, c.Template, err)
		}
		return fmt.Errorf("create sandbox %s: %w", c.Name, err)
	}
	if _, err := d.Run.Run(ctx, NonceWriteArgs(c.Name), strings.NewReader(nonce+"\n")); err != nil {
		return fmt.Errorf("write the nonce into sandbox %s: %w", c.Name, err)
	}
	if _, err := d.Run.Run(ctx, watcherCheckArgs(c.Name, d.watcher()), nil); err != nil {
		return fmt.Errorf("template %s does not carry the watcher at %s (see image/README.md): %w", c.Template, d.watcher(), err)
	}
	for _, p := range ports {
		if _, err := d.Run.Run(ctx, policyAllowArgs(c.Name, p), nil); err != nil {
			return fmt.Errorf("allow sandbox %s to reach %s: %w", c.Name, PolicyResource(p), err)
		}
	}
	return nil
}

// templateMissing reports whether `sbx template ls` answers with a
// listing that lacks the template: only then is a failed create the
// template's. A listing the runtime cannot read, or that fails, blames
// nothing on the template (the create's own error stands).
func (d *Driver) templateMissing(ctx context.Context, template string) bool {
	out, err := d.Run.Run(ctx, templateLsArgs(), nil)
	if err != nil {
		return false
	}
	names, ok := parseTemplateList(string(out))
	if !ok {
		return false
	}
	for _, n := range names {
		if n == template {
			return false
		}
	}
	return true
}

// ReadNonce reads the nonce back from inside the sandbox (reconcile).
func (d *Driver) ReadNonce(ctx context.Context, name string) (string, error) {
	out, err := d.Run.Run(ctx, NonceReadArgs(name), nil)
	if err != nil {
		return "", err
	}
	return ParseNonce(string(out))
}

// Remove removes the sandbox's rules and the sandbox, and proves both
// gone: a step that failed is forgiven only when the listing shows that
// there is nothing left to remove (a sandbox or rule already gone). A
// rule listing it cannot read proves nothing: the removal is an error.
func (d *Driver) Remove(ctx context.Context, name string, ports []int) error {
	var errs []error
	for _, p := range ports {
		if _, err := d.Run.Run(ctx, policyRmArgs(name, p), nil); err != nil {
			errs = append(errs, err)
		}
	}
	_, rmErr := d.Run.Run(ctx, rmArgs(name), nil)

	// What is left?
	var left []error
	sandboxes, err := d.List(ctx)
	switch {
	case err != nil:
		left = append(left, fmt.Errorf("list sandboxes to check the removal of %s: %w", name, err))
	default:
		for _, s := range sandboxes {
			if s.Name == name && rmErr != nil {
				left = append(left, fmt.Errorf("sandbox %s is still there after sbx rm --force: %w", name, rmErr))
			} else if s.Name == name {
				left = append(left, fmt.Errorf("sandbox %s is still there after sbx rm --force", name))
			}
		}
	}
	if len(ports) > 0 || len(errs) > 0 {
		rules, _, err := d.rules(ctx)
		if err != nil {
			left = append(left, fmt.Errorf("list policy rules to check the removal of %s's: %w", name, err))
		}
		for _, r := range rules {
			if r.Sandbox() == name && r.Decision == "allow" {
				left = append(left, fmt.Errorf("rule %s (%s) of sandbox %s is still there", r.Name, strings.Join(r.Resources, ","), name))
			}
		}
	}
	return errors.Join(left...)
}

// ScopedPorts are the host ports of the allow rules scoped to the
// sandbox that `sbx policy ls` shows (reconcile adds them to the
// journaled ones: a supervisor killed between the rule and its journal
// entry leaves a rule only the listing knows).
func (d *Driver) ScopedPorts(ctx context.Context, name string) ([]int, error) {
	rules, _, err := d.rules(ctx)
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, r := range rules {
		if r.Sandbox() != name || r.Decision != "allow" {
			continue
		}
		for _, res := range r.Resources {
			if p, ok := strings.CutPrefix(res, "localhost:"); ok {
				if n, err := strconv.Atoi(p); err == nil && n > 0 && n < 65536 {
					ports = append(ports, n)
				}
			}
		}
	}
	return ports, nil
}
