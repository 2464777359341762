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
)

// Runner runs `sbx args...` with stdin (nil: none) and returns its
// stdout; a failure's error carries what the CLI said on stderr.
type Runner interface {
	Run(ctx context.Context, args []string, stdin io.Reader) ([]byte, error)
}

// CLI runs the sbx binary.
type CLI struct {
	Bin string   // default "sbx", looked up on PATH
	Env []string // nil: the supervisor's own (never the agent's)
}

// Run implements Runner.
func (c CLI) Run(ctx context.Context, args []string, stdin io.Reader) ([]byte, error) {
	bin := c.Bin
	if bin == "" {
		bin = "sbx"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = c.Env
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return out, fmt.Errorf("sbx is not installed (%s not found on PATH); Docker Sandboxes need it", bin)
		}
		return out, fmt.Errorf("sbx %s: %w: %s", verb(args), err, strings.TrimSpace(truncate(stderr.String(), 400)))
	}
	return out, nil
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
var ErrNoScope = errors.New("sbx: this sbx cannot scope a network rule to one sandbox (`sbx policy allow network --help` offers no --sandbox); refusing --host-port rather than widening the machine's global policy")

// Preflight is the start-up fail-fast: `sbx version` and `sbx ls` work,
// and, when host ports are wanted, rules can be scoped to one sandbox.
// It returns the version line.
func (d *Driver) Preflight(ctx context.Context, wantPorts bool) (string, error) {
	out, err := d.Run.Run(ctx, versionArgs(), nil)
	if err != nil {
		return "", err
	}
	version := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if _, err := d.List(ctx); err != nil {
		return version, err
	}
	if wantPorts {
		help, err := d.Run.Run(ctx, policyHelpArgs(), nil)
		if err != nil {
			return version, err
		}
		if !policyScopeSupported(string(help)) {
			return version, ErrNoScope
		}
	}
	return version, nil
}

// List returns every sandbox `sbx ls` shows (JSON preferred, the table
// when this CLI has no --json).
func (d *Driver) List(ctx context.Context) ([]Sandbox, error) {
	out, err := d.Run.Run(ctx, lsArgs(true), nil)
	if err != nil {
		var err2 error
		if out, err2 = d.Run.Run(ctx, lsArgs(false), nil); err2 != nil {
			return nil, err
		}
	}
	return parseSandboxList(out)
}

// Create makes the sandbox and everything it needs before the watcher
// starts: the nonce inside it, a check that the template carries the
// watcher, one sandbox-scoped rule per host port. It stops at the first
// failure; the caller removes the sandbox (Remove) on every path, as it
// would after any other failed create.
func (d *Driver) Create(ctx context.Context, c CreateConfig, nonce string, ports []int) error {
	if _, err := d.Run.Run(ctx, createArgs(c), nil); err != nil {
		return fmt.Errorf("create sandbox %s: %w", c.Name, err)
	}
	if _, err := d.Run.Run(ctx, NonceWriteArgs(c.Name), strings.NewReader(nonce)); err != nil {
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
// there is nothing left to remove (a sandbox or rule already gone).
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
			if s.Name == name {
				left = append(left, fmt.Errorf("sandbox %s is still there after sbx rm --force: %v", name, rmErr))
			}
		}
	}
	if len(ports) > 0 || len(errs) > 0 {
		out, err := d.Run.Run(ctx, policyLsArgs(), nil)
		rules := parsePolicyList(string(out))
		switch {
		case err != nil:
			left = append(left, fmt.Errorf("list policy rules to check the removal of %s's: %w", name, err))
		case rules == nil && len(errs) > 0:
			// A listing this runtime cannot read: trust the exit codes.
			left = append(left, errs...)
		default:
			for _, r := range rules {
				if r.Sandbox() == name && r.Decision == "allow" {
					left = append(left, fmt.Errorf("rule %s (%s) of sandbox %s is still there", r.Name, r.Resources, name))
				}
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
	out, err := d.Run.Run(ctx, policyLsArgs(), nil)
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, r := range parsePolicyList(string(out)) {
		if r.Sandbox() != name || r.Decision != "allow" {
			continue
		}
		for _, res := range strings.Split(r.Resources, ",") {
			if p, ok := strings.CutPrefix(strings.TrimSpace(res), "localhost:"); ok {
				if n, err := strconv.Atoi(p); err == nil && n > 0 && n < 65536 {
					ports = append(ports, n)
				}
			}
		}
	}
	return ports, nil
}
