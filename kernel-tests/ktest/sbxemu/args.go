package main

// Argument parsing, as plain functions the unit tests drive: every verb
// of the emulated CLI turns its argv into a request or a usage error,
// before any state is touched.

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// flagDef is one flag of a verb: its spellings and whether it takes a value.
type flagDef struct {
	names []string // "--name", "-n"
	value bool
}

// parsed is a verb's flags (by their first spelling) and positionals.
type parsed struct {
	flags map[string][]string
	pos   []string
}

func (p parsed) has(name string) bool { _, ok := p.flags[name]; return ok }

func (p parsed) last(name string) string {
	v := p.flags[name]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// parseFlags reads args against defs. With stopAt > 0, everything from
// the stopAt-th positional on is a positional (exec's command). "--"
// ends the flags. Unknown flags are errors (strict).
func parseFlags(args []string, defs []flagDef, stopAt int) (parsed, error) {
	p := parsed{flags: map[string][]string{}}
	find := func(name string) *flagDef {
		for i := range defs {
			for _, n := range defs[i].names {
				if n == name {
					return &defs[i]
				}
			}
		}
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if stopAt > 0 && len(p.pos) >= stopAt {
			p.pos = append(p.pos, args[i:]...)
			break
		}
		if a == "--" {
			p.pos = append(p.pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			p.pos = append(p.pos, a)
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		if !strings.HasPrefix(a, "--") {
			// -e K=V: the '=' belongs to the value, not to the flag.
			name, val, hasVal = a[:2], "", false
			if len(a) > 2 {
				if d := find(name); d != nil && d.value {
					val, hasVal = a[2:], true
				} else {
					// A group of boolean short flags: -it.
					for _, c := range a[1:] {
						d := find("-" + string(c))
						if d == nil || d.value {
							return p, fmt.Errorf("unknown shorthand flag: %q in %s", c, a)
						}
						p.flags[d.names[0]] = append(p.flags[d.names[0]], "true")
					}
					continue
				}
			}
		}
		d := find(name)
		if d == nil {
			return p, fmt.Errorf("unknown flag: %s", name)
		}
		switch {
		case !d.value && hasVal:
			return p, fmt.Errorf("flag %s takes no value", name)
		case !d.value:
			val = "true"
		case !hasVal:
			if i+1 >= len(args) {
				return p, fmt.Errorf("flag needs an argument: %s", name)
			}
			i++
			val = args[i]
		}
		p.flags[d.names[0]] = append(p.flags[d.names[0]], val)
	}
	return p, nil
}

var helpFlag = flagDef{names: []string{"--help", "-h"}}

// sandboxNameRE is what `sbx create --name` documents: letters,
// numbers, hyphens, periods and plus signs. The docs give no length;
// the emulator allows 63 (strict: a sandbox's host name is one label).
var sandboxNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+-]{0,62}$`)

// agents the emulator knows: the documented `sbx create AGENT`
// subcommands. Unknown ones are refused.
var agents = map[string]bool{"claude": true, "codex": true, "copilot": true, "gemini": true,
	"devin": true, "cagent": true, "kiro": true, "opencode": true, "shell": true}

// workspace is one `sbx create` path: passed through at the same path.
type workspace struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly"`
}

type createReq struct {
	Agent      string
	Name       string
	Template   string
	Memory     string
	EnvNames   []string // create-time -e: accepted, never visible to exec
	Workspaces []workspace
	Help       bool
}

func parseCreate(args []string) (createReq, error) {
	p, err := parseFlags(args, []flagDef{
		{names: []string{"--name"}, value: true},
		{names: []string{"--template", "-t"}, value: true},
		{names: []string{"--memory", "-m"}, value: true},
		{names: []string{"--cpus"}, value: true},
		{names: []string{"--branch"}, value: true},
		{names: []string{"--kit"}, value: true},
		{names: []string{"--quiet", "-q"}},
		{names: []string{"--env", "-e"}, value: true},
		helpFlag,
	}, 0)
	if err != nil {
		return createReq{}, err
	}
	r := createReq{Name: p.last("--name"), Template: p.last("--template"), Memory: p.last("--memory"), Help: p.has("--help")}
	if r.Help {
		return r, nil
	}
	if len(p.pos) == 0 {
		return r, errors.New(`"sbx create" requires an agent: sbx create AGENT [PATH...]`)
	}
	r.Agent = p.pos[0]
	if !agents[r.Agent] {
		return r, fmt.Errorf("unknown agent %q", r.Agent)
	}
	if r.Template == "" {
		return r, errors.New("the emulator needs --template (it has no registry to pull an agent's default template from)")
	}
	if r.Memory != "" {
		if _, err := parseMemory(r.Memory); err != nil {
			return r, err
		}
	}
	for _, kv := range p.flags["--env"] {
		name, _, _ := strings.Cut(kv, "=")
		if name == "" {
			return r, fmt.Errorf("invalid environment variable %q", kv)
		}
		r.EnvNames = append(r.EnvNames, name)
	}
	if len(p.pos) < 2 {
		// Documented: sbx create [flags] AGENT PATH [PATH...], "the
		// workspace path is required".
		return r, fmt.Errorf(`"sbx create %s" requires a workspace: sbx create AGENT PATH [PATH...]`, r.Agent)
	}
	for _, a := range p.pos[1:] {
		w, err := parseWorkspace(a)
		if err != nil {
			return r, err
		}
		r.Workspaces = append(r.Workspaces, w)
	}
	if r.Name == "" {
		// Documented default: <agent>-<workdir>.
		r.Name = r.Agent + "-" + filepath.Base(r.Workspaces[0].Path)
	}
	if !sandboxNameRE.MatchString(r.Name) {
		return r, fmt.Errorf("invalid sandbox name %q: letters, numbers, hyphens, periods and plus signs only (at most 63)", r.Name)
	}
	return r, nil
}

// parseWorkspace reads PATH or PATH:ro. There is no source:target form
// (documented: a workspace passes through at the same path); the
// emulator also wants the path absolute and clean.
func parseWorkspace(a string) (workspace, error) {
	w := workspace{Path: a}
	if p, ok := strings.CutSuffix(a, ":ro"); ok {
		w = workspace{Path: p, ReadOnly: true}
	}
	switch {
	case strings.Contains(w.Path, ":"):
		return w, fmt.Errorf("workspace %q: there is no SOURCE:TARGET form; a workspace passes through at its own path (append :ro for read-only)", a)
	case !filepath.IsAbs(w.Path) || filepath.Clean(w.Path) != w.Path:
		return w, fmt.Errorf("workspace %q: give an absolute, clean path", a)
	}
	return w, nil
}

// parseMemory reads the documented "binary units (e.g., 1024m, 8g)"
// into bytes; nothing else (strict: no bare bytes, no k).
func parseMemory(s string) (int64, error) {
	for suf, mult := range map[string]int64{"m": 1 << 20, "g": 1 << 30} {
		if num, ok := strings.CutSuffix(strings.ToLower(s), suf); ok {
			if n, err := strconv.ParseInt(num, 10, 64); err == nil && n > 0 {
				return n * mult, nil
			}
		}
	}
	return 0, fmt.Errorf("invalid --memory %q: give binary units such as 1024m or 8g", s)
}

type execReq struct {
	Interactive, TTY, Detach, Privileged bool
	Env                                  []string // K=V or K
	EnvFiles                             []string
	DetachKeys                           string
	User, Workdir                        string
	Name                                 string
	Argv                                 []string
}

func parseExec(args []string) (execReq, error) {
	p, err := parseFlags(args, []flagDef{
		{names: []string{"--interactive", "-i"}},
		{names: []string{"--tty", "-t"}},
		{names: []string{"--detach", "-d"}},
		{names: []string{"--env", "-e"}, value: true},
		{names: []string{"--user", "-u"}, value: true},
		{names: []string{"--workdir", "-w"}, value: true},
		{names: []string{"--privileged"}},
		{names: []string{"--env-file"}, value: true},
		{names: []string{"--detach-keys"}, value: true},
	}, 1)
	if err != nil {
		return execReq{}, err
	}
	r := execReq{Interactive: p.has("--interactive"), TTY: p.has("--tty"), Detach: p.has("--detach"),
		Privileged: p.has("--privileged"), Env: p.flags["--env"], EnvFiles: p.flags["--env-file"],
		DetachKeys: p.last("--detach-keys"), User: p.last("--user"), Workdir: p.last("--workdir")}
	if len(p.pos) < 2 {
		return r, errors.New(`"sbx exec" requires at least 2 arguments: sbx exec [OPTIONS] SANDBOX COMMAND [ARG...]`)
	}
	r.Name, r.Argv = p.pos[0], p.pos[1:]
	for _, kv := range r.Env {
		if name, _, _ := strings.Cut(kv, "="); name == "" {
			return r, fmt.Errorf("invalid environment variable %q", kv)
		}
	}
	if r.Workdir != "" && !filepath.IsAbs(r.Workdir) {
		return r, fmt.Errorf("workdir %q is not absolute", r.Workdir)
	}
	return r, nil
}

type rmReq struct {
	Force, All bool
	Names      []string
}

func parseRm(args []string) (rmReq, error) {
	p, err := parseFlags(args, []flagDef{{names: []string{"--force", "-f"}}, {names: []string{"--all"}}}, 0)
	if err != nil {
		return rmReq{}, err
	}
	r := rmReq{Force: p.has("--force"), All: p.has("--all"), Names: p.pos}
	switch {
	case r.All && len(r.Names) > 0:
		return r, errors.New("--all takes no sandbox names")
	case !r.All && len(r.Names) == 0:
		return r, errors.New(`"sbx rm" requires a sandbox name or --all: sbx rm [SANDBOX...] [flags]`)
	}
	return r, nil
}

// policyReq is `sbx policy allow network [--sandbox NAME] RESOURCES`
// or `sbx policy rm network [--sandbox NAME] [--id ID] [--resource RESOURCES]`.
type policyReq struct {
	Verb      string // allow | rm
	Sandbox   string // "" = global
	Resources []string
	ID        string // rm only
	Help      bool
}

// parsePolicyNetwork reads the arguments after `policy VERB network`.
// scoped says whether this CLI knows --sandbox (an older one does not).
func parsePolicyNetwork(verb string, args []string, scoped bool) (policyReq, error) {
	defs := []flagDef{helpFlag, {names: []string{"--global", "-g"}}}
	if scoped {
		defs = append(defs, flagDef{names: []string{"--sandbox"}, value: true})
	}
	if verb == "rm" {
		defs = append(defs, flagDef{names: []string{"--id"}, value: true}, flagDef{names: []string{"--resource"}, value: true})
	}
	p, err := parseFlags(args, defs, 0)
	if err != nil {
		return policyReq{}, err
	}
	r := policyReq{Verb: verb, Sandbox: p.last("--sandbox"), ID: p.last("--id"), Help: p.has("--help")}
	if r.Help {
		return r, nil
	}
	if r.Sandbox != "" && p.has("--global") {
		return r, errors.New("--sandbox and --global are mutually exclusive")
	}
	list := ""
	switch {
	case verb == "rm" && len(p.pos) != 0:
		return r, errors.New(`"sbx policy rm network" takes no arguments: name the rule with --id and/or --resource`)
	case verb == "rm" && r.ID == "" && !p.has("--resource"):
		return r, errors.New(`"sbx policy rm network" needs --id or --resource`)
	case verb == "rm":
		list = p.last("--resource")
		if list == "" {
			return r, nil
		}
	case len(p.pos) != 1:
		return r, fmt.Errorf(`"sbx policy %s network" requires exactly 1 argument: RESOURCES (comma-separated)`, verb)
	default:
		list = p.pos[0]
	}
	for _, res := range strings.Split(list, ",") {
		if err := checkResource(res); err != nil {
			return r, err
		}
		r.Resources = append(r.Resources, res)
	}
	return r, nil
}

var hostRE = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

// checkResource accepts "**", host, *.domain, each with an optional :port.
func checkResource(res string) error {
	if res == "**" {
		return nil
	}
	host, port, hasPort := strings.Cut(res, ":")
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("invalid port in resource %q", res)
		}
	}
	if !hostRE.MatchString(host) {
		return fmt.Errorf("invalid resource %q: a host name, *.domain, an IP address or **, with an optional :port", res)
	}
	return nil
}

// ruleMatches reports whether an allow rule's resource admits a TCP
// connection to host:port, where host is what the proxy sees (after it
// rewrote host.docker.internal to localhost).
func ruleMatches(resource, host string, port int) bool {
	if resource == "**" {
		return true
	}
	rh, rp, hasPort := strings.Cut(resource, ":")
	if hasPort && rp != strconv.Itoa(port) {
		return false
	}
	if d, ok := strings.CutPrefix(rh, "*."); ok {
		return strings.HasSuffix(strings.ToLower(host), "."+strings.ToLower(d))
	}
	return strings.EqualFold(rh, host)
}

func parseLs(args []string) (jsonOut, quiet bool, err error) {
	p, err := parseFlags(args, []flagDef{{names: []string{"--json"}}, {names: []string{"--quiet", "-q"}}}, 0)
	if err != nil {
		return false, false, err
	}
	if len(p.pos) != 0 {
		return false, false, fmt.Errorf("unexpected argument %q", p.pos[0])
	}
	return p.has("--json"), p.has("--quiet"), nil
}

// parsePolicyLs reads `policy ls` flags: --wide (rules, where the
// table is a summary), --type, --include-inactive (accepted; the
// emulator's rules are all active and of type network).
func parsePolicyLs(args []string) (wide bool, err error) {
	p, err := parseFlags(args, []flagDef{{names: []string{"--wide"}}, {names: []string{"--type"}, value: true},
		{names: []string{"--include-inactive"}}}, 0)
	if err != nil {
		return false, err
	}
	if len(p.pos) != 0 {
		return false, fmt.Errorf("unexpected argument %q", p.pos[0])
	}
	if t := p.last("--type"); t != "" && t != "all" && t != "network" {
		return false, fmt.Errorf(`--type %q: give "all" or "network"`, t)
	}
	return p.has("--wide"), nil
}
