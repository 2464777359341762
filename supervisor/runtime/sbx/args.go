package sbx

// Every argv this runtime hands to `sbx` (and to `docker` for a
// template), built by pure functions with table tests (args_test.go).
// The CLI is young and documented as subject to change: a re-spelling
// is an edit here.

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"deathwatch/shared"
	"deathwatch/supervisor"
)

// Workspace is one mount as sbx takes it: the host path, passed through
// at the same absolute path inside the sandbox.
type Workspace struct {
	Path     string
	ReadOnly bool
}

// Mount is one --mount of the launch: a host source and the target the
// agent's commands name.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// CreateConfig is what `sbx create` needs.
type CreateConfig struct {
	Name       string
	Template   string
	Memory     int64 // bytes; 0 = the runtime's default
	Workspaces []Workspace
}

// versionArgs checks that the CLI runs (start-up fail-fast).
func versionArgs() []string { return []string{"version"} }

// lsArgs lists the sandboxes; JSON is preferred (parseSandboxList reads
// both).
func lsArgs(json bool) []string {
	if json {
		return []string{"ls", "--json"}
	}
	return []string{"ls"}
}

// createArgs creates the sandbox: the run-scoped name, the template,
// the memory bound and each workspace (":ro" when read-only) after the
// agent, as the documentation spells `sbx create [flags] AGENT PATH
// [PATH...]`. No -e: the environment travels only inside the spec frame.
func createArgs(c CreateConfig) []string {
	a := []string{"create", "--name", c.Name, "--template", c.Template}
	if c.Memory > 0 {
		a = append(a, "--memory", memoryArg(c.Memory))
	}
	a = append(a, Agent)
	for _, w := range c.Workspaces {
		p := w.Path
		if w.ReadOnly {
			p += ":ro"
		}
		a = append(a, p)
	}
	return a
}

// memoryArg spells bytes in the documented "binary units (e.g., 1024m,
// 8g)": whole GiB as g, anything else as MiB, rounded up (a bound is
// never made tighter than asked, nor silently dropped).
func memoryArg(n int64) string {
	if n%(1<<30) == 0 {
		return strconv.FormatInt(n>>30, 10) + "g"
	}
	return strconv.FormatInt((n+(1<<20)-1)>>20, 10) + "m"
}

// execArgs starts the watcher in control mode: -i so that the exec's
// stdin is the control stream, as root in the VM (the watcher makes the
// agent's PID namespace and drops to the agent uid itself), with
// supervisor.WatcherEnv for the watcher alone (`-e NAME=VALUE` holds no
// secret; the agent's environment is inside the spec).
func execArgs(name, watcher string) []string {
	a := []string{"exec", "-i", "-u", ExecUser}
	for _, e := range supervisor.WatcherEnv {
		a = append(a, "-e", e)
	}
	return append(a, name, watcher, "--control=stdin")
}

// watcherCheckArgs asks the template's watcher for its version, right
// after create: a template without the watcher fails before any spec
// is sent.
func watcherCheckArgs(name, watcher string) []string {
	return []string{"exec", "-u", ExecUser, name, watcher, "--version"}
}

// rmArgs removes the sandbox whatever its state.
func rmArgs(name string) []string { return []string{"rm", "--force", name} }

// PolicyResource is the rule's resource for a host port: localhost,
// because the host proxy rewrites host.docker.internal to localhost
// before it matches (a rule naming host.docker.internal never matches).
func PolicyResource(port int) string { return "localhost:" + strconv.Itoa(port) }

// policyAllowArgs lets one sandbox, and only it, reach the host's port.
func policyAllowArgs(name string, port int) []string {
	return []string{"policy", "allow", "network", "--sandbox", name, PolicyResource(port)}
}

// policyRmArgs removes that rule again. The reference names the rule
// with --resource (or --id), not a positional; --sandbox keeps the
// removal to this sandbox's own rule.
func policyRmArgs(name string, port int) []string {
	return []string{"policy", "rm", "network", "--sandbox", name, "--resource", PolicyResource(port)}
}

// policyHelpArgs prints the help policyScopeSupported reads.
func policyHelpArgs() []string { return []string{"policy", "allow", "network", "--help"} }

// policyLsArgs lists the rules (reconcile looks for a sandbox's own);
// wide for a CLI whose plain listing is a summary per policy.
func policyLsArgs(wide bool) []string {
	if wide {
		return []string{"policy", "ls", "--wide"}
	}
	return []string{"policy", "ls"}
}

// templateLsArgs lists the loaded templates (a failed create asks
// whether its template is one).
func templateLsArgs() []string { return []string{"template", "ls"} }

// templateLoadArgs loads an image tarball (docker image save) as a template.
func templateLoadArgs(tarball string) []string { return []string{"template", "load", tarball} }

// dockerImageSaveArgs is the docker side of making a template.
func dockerImageSaveArgs(image, tarball string) []string {
	return []string{"image", "save", "-o", tarball, image}
}

// CheckOptions refuses, before anything is created, what this runtime
// cannot honour, one line each. network is the --network mode the user
// set explicitly ("" when unset): a sandbox has no engine network to
// join, and its egress is the host proxy's. transport is the control
// transport asked for ("" or "stdin"): a unix socket cannot cross the
// VM boundary.
func CheckOptions(network, transport string, hostPorts []int) error {
	if network != "" {
		return fmt.Errorf("sbx: --network %s cannot be honoured: a sandbox joins no engine network and reaches out only through the host's policy proxy; drop --network (use --host-port for the controller's port)", network)
	}
	switch transport {
	case "", "stdin":
	default:
		return fmt.Errorf("sbx: control transport %q cannot cross the microVM boundary; the control stream rides sbx exec's stdin/stdout", transport)
	}
	seen := map[int]bool{}
	for _, p := range hostPorts {
		if p < 1 || p > 65535 {
			return fmt.Errorf("sbx: --host-port %d is not a TCP port", p)
		}
		if seen[p] {
			return fmt.Errorf("sbx: --host-port %d given twice", p)
		}
		seen[p] = true
	}
	return nil
}

// Bridge turns the mounts into workspaces (each source at its own path)
// and the mount-bridge links that make each differing target a symlink
// to its source inside the box, so the agent's commands keep naming the
// targets. A target that is the source needs no link; two mounts of one
// source must agree on read-only.
//
// sbx create takes at least one workspace (documented: AGENT PATH
// [PATH...]), so no mounts is an error; the caller may add a scratch
// folder of its own.
func Bridge(mounts []Mount) ([]Workspace, []shared.Link, error) {
	if len(mounts) == 0 {
		return nil, nil, errors.New("sbx: a sandbox needs at least one workspace (sbx create AGENT PATH...); pass --mount")
	}
	var ws []Workspace
	var links []shared.Link
	bySource := map[string]int{}
	targets := map[string]bool{}
	for _, m := range mounts {
		if !isAbsClean(m.Source) || !isAbsClean(m.Target) {
			return nil, nil, fmt.Errorf("sbx: mount %s:%s: source and target must be absolute, clean paths", m.Source, m.Target)
		}
		if strings.HasSuffix(m.Source, ":ro") || strings.Contains(m.Source, ",") {
			return nil, nil, fmt.Errorf("sbx: mount source %q cannot be a workspace path (it would read as a flag of the path)", m.Source)
		}
		if targets[m.Target] {
			return nil, nil, fmt.Errorf("sbx: two mounts target %s", m.Target)
		}
		targets[m.Target] = true
		if i, ok := bySource[m.Source]; ok {
			if ws[i].ReadOnly != m.ReadOnly {
				return nil, nil, fmt.Errorf("sbx: %s is mounted both read-only and read-write; a workspace is one or the other", m.Source)
			}
		} else {
			bySource[m.Source] = len(ws)
			ws = append(ws, Workspace{Path: m.Source, ReadOnly: m.ReadOnly})
		}
		if m.Target != m.Source {
			links = append(links, shared.Link{Target: m.Target, Source: m.Source})
		}
	}
	for _, l := range links {
		if _, ok := bySource[l.Target]; ok {
			return nil, nil, errors.New("sbx: target " + l.Target + " is also a workspace's own path; the link would replace it")
		}
	}
	return ws, links, nil
}

func isAbsClean(p string) bool { return strings.HasPrefix(p, "/") && path.Clean(p) == p }
