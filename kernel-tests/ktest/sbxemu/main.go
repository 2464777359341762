// Command sbxemu is the kernel tests' stand-in for Docker Sandboxes'
// `sbx` CLI: the tests install it as `sbx` first on PATH. It implements
// the surface Docker's current sbx reference documents over the real
// Docker engine, strict wherever the documentation is silent:
//
//	sbx [--no-input] VERB ...
//	sbx version | sbx login | sbx logout
//	sbx ls [--json] [-q]
//	sbx create AGENT PATH[:ro] [PATH[:ro]...] --template T [--name N] [--memory M] [-e K=V]...
//	sbx exec [-i] [-t] [-d] [--privileged] [-e K[=V]]... [--env-file F] [-u USER] [-w DIR] NAME CMD [ARG...]
//	sbx stop NAME
//	sbx rm --force NAME... | sbx rm --force --all
//	sbx policy set-default|init allow-all|balanced|deny-all | sbx policy reset
//	sbx policy allow network [-g] RESOURCES
//	sbx policy rm network [--id ID] [--resource RESOURCES]
//	sbx policy ls [--wide]
//	sbx template load FILE.tar | sbx template ls
//
// First use, as documented: every daemon verb needs `sbx login`, then a
// default network policy; without one the daemon prompts (1-3 on
// stdin), and with --no-input or an ended stdin it fails and says to
// run `sbx policy set-default`. Rules apply to every sandbox; `policy
// ls` prints POLICY SOURCE APPLIES TO SUMMARY, the rules with --wide.
// A sandbox with no exec session stops by itself after 30 s, and exec
// of a stopped one boots it first.
//
// A sandbox is a container "sbxemu-NAME" whose PID 1 is the emulator's
// own idle init (the sandbox's init, never the caller's program), with
// --network none and each workspace bind-mounted at its own path. Its
// only way out is a forwarder (a hidden mode of this binary, one per
// running sandbox) that listens inside the container's network
// namespace on host.docker.internal (127.0.0.2 there) and passes a
// connection to the host's 127.0.0.1:PORT only while an allow rule for
// localhost:PORT (global or scoped to the sandbox) exists, checked at
// connect time: the documented proxy rewrites host.docker.internal to
// localhost before matching. The forwarder also stops the idle sandbox.
//
// State lives in $SBXEMU_STATE (required): sandboxes/NAME.json,
// policy.json, login.json, templates.json, sessions/NAME/PID,
// fwd/NAME.{pid,sock}, and calls.jsonl, one JSON line per call with the
// argv and the names (never the values) of the environment.
//
// Strict where the documentation is silent:
//   - create leaves the sandbox stopped; exec starts it first;
//   - create-time -e variables are not visible to exec (they are kept nowhere);
//   - exec runs as the template's unprivileged user (uid 1000) unless -u says otherwise;
//   - a rule outlives its sandbox: rm does not remove the sandbox's rules;
//   - rm without --force fails (it would prompt); rm of an unknown sandbox fails;
//   - policy rm that matches no rule fails;
//   - create needs a template that `sbx template load` loaded;
//   - only explicit localhost:PORT rules open a port on host.docker.internal.
//
// Other spellings and misbehaviours are switches of its environment
// (modes.go): SBXEMU_POLICY_SCOPE=sandbox (rules of one sandbox with
// --sandbox), SBXEMU_POLICY_LS=rules|provenance (the older tables),
// SBXEMU_EXEC_EOF=lost (an exec client's end never reaches the
// sandbox), SBXEMU_IDLE_STOP and SBXEMU_BOOT_DELAY (durations),
// SBXEMU_WEDGE=1 (a daemon that never answers).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

const (
	containerPrefix = "sbxemu-"
	labelState      = "sbxemu.state"
	labelSandbox    = "sbxemu.sandbox"
	initPath        = "/.sbxemu/init"
	hostAlias       = "127.0.0.2" // host.docker.internal inside a sandbox
	agentUser       = "1000:1000" // exec's default user
	version         = "v0.0.0-deathwatch-emulator"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "__init":
			os.Exit(initMain())
		case "__forward":
			os.Exit(forwardMain(os.Args[2:]))
		case "__hold":
			os.Exit(holdMain())
		}
	}
	os.Exit(run(os.Args[1:]))
}

type emu struct {
	state string
	mode  mode
}

func run(args []string) int {
	dir := os.Getenv("SBXEMU_STATE")
	if dir == "" || !filepath.IsAbs(dir) {
		fmt.Fprintln(os.Stderr, "sbx (emulator): set SBXEMU_STATE to an absolute folder for its state")
		return 2
	}
	m, err := readMode()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbx (emulator):", err)
		return 2
	}
	e := &emu{state: dir, mode: m}
	if err := e.record(args); err != nil {
		fmt.Fprintln(os.Stderr, "sbx (emulator): record the call:", err)
		return 2
	}
	args = globalFlags(args, &e.mode)
	if needsDaemon(args) {
		if e.mode.wedged {
			wedge()
		}
		if err := e.firstUse(); err != nil {
			fmt.Fprintln(os.Stderr, "ERROR:", err)
			return 1
		}
	}
	code, err := e.dispatch(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ERROR:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// call is one line of calls.jsonl.
type call struct {
	Time string   `json:"time"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"` // names only
}

func (e *emu) record(args []string) error {
	if err := os.MkdirAll(e.state, 0o700); err != nil {
		return err
	}
	var names []string
	for _, kv := range os.Environ() {
		n, _, _ := strings.Cut(kv, "=")
		names = append(names, n)
	}
	sort.Strings(names)
	b, _ := json.Marshal(call{Time: time.Now().UTC().Format(time.RFC3339Nano), Argv: append([]string{"sbx"}, args...), Env: names})
	f, err := os.OpenFile(filepath.Join(e.state, "calls.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(append(b, '\n'))
	return err
}

func (e *emu) dispatch(args []string) (int, error) {
	if len(args) == 0 {
		return 1, errors.New("usage: sbx COMMAND")
	}
	rest := args[1:]
	switch args[0] {
	case "version":
		if len(rest) != 0 {
			return 1, errors.New(`"sbx version" takes no arguments`)
		}
		fmt.Printf("sbx version %s (deathwatch kernel-tests emulator)\n", version)
		return 0, nil
	case "ls":
		j, q, err := parseLs(rest)
		if err != nil {
			return 1, err
		}
		return 0, e.ls(j, q)
	case "create":
		r, err := parseCreate(rest)
		if err != nil {
			return 1, err
		}
		if r.Help {
			fmt.Println("Usage: sbx create AGENT [PATH...] [flags]")
			return 0, nil
		}
		return 0, e.create(r)
	case "exec":
		r, err := parseExec(rest)
		if err != nil {
			return 1, err
		}
		return e.exec(r)
	case "stop":
		if len(rest) != 1 {
			return 1, errors.New(`"sbx stop" requires 1 argument`)
		}
		return 0, e.stop(rest[0])
	case "rm":
		r, err := parseRm(rest)
		if err != nil {
			return 1, err
		}
		return 0, e.rm(r)
	case "policy":
		return e.policy(rest)
	case "login":
		return e.login(rest)
	case "logout":
		return e.logout()
	case "template":
		return e.template(rest)
	}
	return 1, fmt.Errorf("unknown command %q for \"sbx\"", args[0])
}

// ---- state ----

type sandbox struct {
	Name       string      `json:"name"`
	Agent      string      `json:"agent"`
	Template   string      `json:"template"`
	Memory     string      `json:"memory,omitempty"`
	Workspaces []workspace `json:"workspaces"`
	Created    string      `json:"created"`
}

type rule struct {
	Name     string `json:"name"`
	Sandbox  string `json:"sandbox,omitempty"` // "" = global
	Decision string `json:"decision"`
	Resource string `json:"resource"`
}

type policyFile struct {
	Default string `json:"default,omitempty"` // allow-all | balanced | deny-all; "" = not chosen
	Next    int    `json:"next"`
	Rules   []rule `json:"rules"`
}

func (e *emu) path(parts ...string) string {
	return filepath.Join(append([]string{e.state}, parts...)...)
}

// lock serialises state changes between concurrent calls.
func (e *emu) lock() func() {
	f, err := os.OpenFile(e.path("lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return func() {}
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	return func() { f.Close() }
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (e *emu) sandbox(name string) (sandbox, error) {
	var s sandbox
	if !sandboxNameRE.MatchString(name) {
		return s, fmt.Errorf("sandbox %q not found", name)
	}
	if err := readJSON(e.path("sandboxes", name+".json"), &s); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return s, fmt.Errorf("sandbox %q not found", name)
		}
		return s, err
	}
	return s, nil
}

func (e *emu) sandboxes() ([]sandbox, error) {
	ms, _ := filepath.Glob(e.path("sandboxes", "*.json"))
	var out []sandbox
	for _, m := range ms {
		var s sandbox
		if err := readJSON(m, &s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (e *emu) policyFile() (policyFile, error) {
	var p policyFile
	err := readJSON(e.path("policy.json"), &p)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return p, err
}

func docker(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %v: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// containerName is the sandbox's container: docker names take no '+'
// (sbx names take no '_', so the mapping is one to one).
func containerName(sandbox string) string {
	return containerPrefix + strings.ReplaceAll(sandbox, "+", "_")
}

// containerPID is the host pid of the sandbox's init, 0 when it is not running.
func containerPID(name string) int {
	out, err := docker("inspect", "--format", "{{.State.Running}} {{.State.Pid}}", containerName(name))
	if err != nil {
		return 0
	}
	running, pid, _ := strings.Cut(strings.TrimSpace(out), " ")
	if running != "true" {
		return 0
	}
	n, _ := strconv.Atoi(pid)
	return n
}

// ---- verbs ----

func (e *emu) ls(jsonOut, quiet bool) error {
	ss, err := e.sandboxes()
	if err != nil {
		return err
	}
	type row struct {
		Name       string   `json:"name"`
		Agent      string   `json:"agent"`
		Status     string   `json:"status"`
		Template   string   `json:"template"`
		Workspaces []string `json:"workspaces"`
		Created    string   `json:"created_at"`
	}
	rows := []row{}
	for _, s := range ss {
		status := "stopped"
		if containerPID(s.Name) != 0 {
			status = "running"
		}
		var ws []string
		for _, w := range s.Workspaces {
			p := w.Path
			if w.ReadOnly {
				p += ":ro"
			}
			ws = append(ws, p)
		}
		rows = append(rows, row{s.Name, s.Agent, status, s.Template, ws, s.Created})
	}
	if quiet {
		for _, r := range rows {
			fmt.Println(r.Name)
		}
		return nil
	}
	if jsonOut {
		b, _ := json.MarshalIndent(map[string]any{"sandboxes": rows}, "", "  ")
		fmt.Println(string(b))
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tAGENT\tSTATUS\tPORTS\tWORKSPACE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\t%s\n", r.Name, r.Agent, r.Status, strings.Join(r.Workspaces, ","))
	}
	return tw.Flush()
}

func (e *emu) create(r createReq) error {
	defer e.lock()()
	var templates []string
	_ = readJSON(e.path("templates.json"), &templates)
	found := false
	for _, t := range templates {
		found = found || t == r.Template
	}
	if !found {
		return fmt.Errorf("template %q is not loaded; run: sbx template load FILE.tar", r.Template)
	}
	if _, err := e.sandbox(r.Name); err == nil {
		return fmt.Errorf("sandbox %q already exists", r.Name)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"create", "--name", containerPrefix + r.Name,
		"--label", labelState + "=" + e.state, "--label", labelSandbox + "=" + r.Name,
		"--network", "none", "--hostname", r.Name, "--user", "0:0",
		"--pull", "never", "--restart", "no", "--log-driver", "none",
		// Root in a microVM holds every capability of its own kernel;
		// CAP_SYS_ADMIN is the one the watcher's PID namespace needs,
		// CAP_SYS_PTRACE the one that reads another uid's
		// /proc/PID/environ (prove-deathwatch counts the agent's
		// processes so); an exec user other than root holds none.
		"--cap-add", "SYS_ADMIN", "--cap-add", "SYS_PTRACE",
		"-v", self + ":" + initPath + ":ro", "--entrypoint", initPath}
	if r.Memory != "" {
		args = append(args, "--memory", r.Memory)
	}
	for _, w := range r.Workspaces {
		fi, err := os.Lstat(w.Path)
		if err != nil {
			return fmt.Errorf("workspace %s: %w", w.Path, err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("workspace %s is a symlink", w.Path)
		}
		if !fi.IsDir() && !w.ReadOnly {
			return fmt.Errorf("workspace %s: only a read-only workspace may name a single file", w.Path)
		}
		m := w.Path + ":" + w.Path
		if w.ReadOnly {
			m += ":ro"
		}
		args = append(args, "-v", m)
	}
	args = append(args, r.Template, "__init")
	if _, err := docker(args...); err != nil {
		return fmt.Errorf("create sandbox %s: %w", r.Name, err)
	}
	s := sandbox{Name: r.Name, Agent: r.Agent, Template: r.Template, Memory: r.Memory,
		Workspaces: r.Workspaces, Created: time.Now().UTC().Format(time.RFC3339)}
	if err := writeJSON(e.path("sandboxes", r.Name+".json"), s); err != nil {
		_, _ = docker("rm", "-f", containerName(r.Name))
		return err
	}
	fmt.Printf("Created sandbox %s\n", r.Name)
	return nil
}

// start boots a stopped sandbox: the container, host.docker.internal in
// its /etc/hosts, and its forwarder.
func (e *emu) start(name string) error {
	if containerPID(name) != 0 && e.forwarderAlive(name) {
		return nil
	}
	if containerPID(name) == 0 {
		time.Sleep(e.mode.bootDelay) // a microVM boots
		if _, err := docker("start", containerName(name)); err != nil {
			return fmt.Errorf("start sandbox %s: %w", name, err)
		}
	}
	pid := containerPID(name)
	if pid == 0 {
		return fmt.Errorf("sandbox %s stopped right after start", name)
	}
	hosts := fmt.Sprintf("/proc/%d/root/etc/hosts", pid)
	old, _ := os.ReadFile(hosts)
	if !strings.Contains(string(old), "host.docker.internal") {
		f, err := os.OpenFile(hosts, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("write host.docker.internal into %s: %w", name, err)
		}
		fmt.Fprintf(f, "%s\thost.docker.internal\n", hostAlias)
		f.Close()
	}
	return e.startForwarder(name, pid)
}

func (e *emu) forwarderAlive(name string) bool {
	c, err := net.DialTimeout("unix", e.sockPath(name), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintln(c, "ping")
	line, _ := bufio.NewReader(c).ReadString('\n')
	return line == "ok\n"
}

func (e *emu) startForwarder(name string, pid int) error {
	e.killForwarder(name)
	if err := os.MkdirAll(e.path("fwd"), 0o700); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(e.path("forwarder.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(self, "__forward", e.state, name, strconv.Itoa(pid))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the forwarder of %s: %w", name, err)
	}
	if err := os.WriteFile(e.path("fwd", name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	_ = cmd.Process.Release()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if e.forwarderAlive(name) {
			return nil
		}
	}
	e.killForwarder(name)
	return fmt.Errorf("the forwarder of %s did not come up", name)
}

// killForwarder ends the sandbox's forwarder, checking that the pid is
// still a forwarder of this state and sandbox.
func (e *emu) killForwarder(name string) {
	b, err := os.ReadFile(e.path("fwd", name+".pid"))
	if err != nil {
		return
	}
	pid, _ := strconv.Atoi(string(b))
	if pid > 0 {
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		a := strings.Split(string(cl), "\x00")
		if len(a) >= 4 && a[1] == "__forward" && a[2] == e.state && a[3] == name {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
				if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(st), ") Z ") {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	os.Remove(e.path("fwd", name+".pid"))
	os.Remove(e.sockPath(name))
}

func (e *emu) exec(r execReq) (int, error) {
	unlock := e.lock()
	if _, err := e.sandbox(r.Name); err != nil {
		unlock()
		return 1, err
	}
	if err := e.start(r.Name); err != nil {
		unlock()
		return 1, err
	}
	if !e.mode.eofLost {
		if err := e.addSession(r.Name, os.Getpid()); err != nil {
			unlock()
			return 1, err
		}
	}
	unlock()
	args := []string{"docker", "exec"}
	if r.Interactive {
		args = append(args, "-i")
	}
	if r.TTY {
		args = append(args, "-t")
	}
	if r.Detach {
		args = append(args, "-d")
	}
	if r.Privileged {
		args = append(args, "--privileged")
	}
	if r.DetachKeys != "" {
		args = append(args, "--detach-keys", r.DetachKeys)
	}
	for _, f := range r.EnvFiles {
		args = append(args, "--env-file", f)
	}
	for _, kv := range r.Env {
		args = append(args, "-e", kv)
	}
	user := r.User
	if user == "" {
		user = agentUser
	}
	args = append(args, "-u", user)
	if r.Workdir != "" {
		args = append(args, "-w", r.Workdir)
	}
	args = append(args, containerName(r.Name))
	args = append(args, r.Argv...)
	bin, err := exec.LookPath("docker")
	if err != nil {
		return 1, err
	}
	if e.mode.eofLost {
		args[0] = bin
		return e.execLost(r.Name, args)
	}
	// Replace this process: killing `sbx exec` kills the docker client,
	// whose end closes the exec's stdin, as the real CLI's would.
	return 1, syscall.Exec(bin, args, os.Environ())
}

func (e *emu) stop(name string) error {
	defer e.lock()()
	if _, err := e.sandbox(name); err != nil {
		return err
	}
	e.killForwarder(name)
	_, err := docker("stop", "--time", "1", containerName(name))
	return err
}

func (e *emu) rm(r rmReq) error {
	if !r.Force {
		// Documented: rm asks for confirmation, --force skips it "for
		// non-interactive scripts". The emulator never has a terminal.
		return errors.New("sbx rm asks for confirmation and there is no terminal; pass --force")
	}
	defer e.lock()()
	if r.All {
		ss, err := e.sandboxes()
		if err != nil {
			return err
		}
		for _, s := range ss {
			r.Names = append(r.Names, s.Name)
		}
	}
	var errs []error
	for _, name := range r.Names {
		if _, err := e.sandbox(name); err != nil {
			errs = append(errs, err)
			continue
		}
		e.killForwarder(name)
		if out, err := docker("rm", "-f", containerName(name)); err != nil && !strings.Contains(out, "No such container") {
			errs = append(errs, err)
			continue
		}
		os.Remove(e.path("sandboxes", name+".json"))
		fmt.Printf("Removed sandbox %s\n", name)
	}
	return errors.Join(errs...)
}

const allowNetworkHelp = `Allow sandbox network access to the specified hosts.

RESOURCES is a comma-separated list of hostnames, domains, or IP addresses.
Supports exact domains (example.com), wildcard subdomains (*.example.com),
and optional port suffixes (example.com:443). Use "**" to allow all hosts.

Usage:
  sbx policy allow network RESOURCES [flags]

Flags:
  -g, --global           Apply the rule to all sandboxes (the default)
  -h, --help             help for network
%s
Global Flags:
  -D, --debug   Enable debug logging
`

const sandboxFlagHelp = "      --sandbox string   Apply the rule to the named sandbox only\n"

func (e *emu) policy(args []string) (int, error) {
	if len(args) == 0 {
		return 1, errors.New("usage: sbx policy allow|rm|ls")
	}
	switch args[0] {
	case "set-default", "init":
		if len(args) != 2 {
			return 1, fmt.Errorf(`"sbx policy %s" requires 1 argument: allow-all, balanced or deny-all`, args[0])
		}
		if err := e.setDefault(args[1], args[0] == "init"); err != nil {
			return 1, err
		}
		fmt.Printf("Default network policy: %s\n", args[1])
		return 0, nil
	case "reset":
		defer e.lock()()
		return 0, writeJSON(e.path("policy.json"), policyFile{})
	case "ls":
		wide, err := parsePolicyLs(args[1:])
		if err != nil {
			return 1, err
		}
		p, err := e.policyFile()
		if err != nil {
			return 1, err
		}
		return 0, e.policyLs(os.Stdout, p, wide)
	case "allow", "rm":
		if len(args) < 2 || args[1] != "network" {
			return 1, fmt.Errorf("usage: sbx policy %s network [flags] RESOURCES", args[0])
		}
		r, err := parsePolicyNetwork(args[0], args[2:], e.mode.scoped)
		if err != nil {
			return 1, err
		}
		if r.Help {
			scope := ""
			if e.mode.scoped {
				scope = sandboxFlagHelp
			}
			fmt.Printf(allowNetworkHelp, scope)
			return 0, nil
		}
		return 0, e.changePolicy(r)
	}
	return 1, fmt.Errorf("unknown command %q for \"sbx policy\"", args[0])
}

func (e *emu) changePolicy(r policyReq) error {
	unlock := e.lock()
	p, err := e.policyFile()
	if err != nil {
		unlock()
		return err
	}
	if r.Sandbox != "" && r.Verb == "allow" {
		if _, err := e.sandbox(r.Sandbox); err != nil {
			unlock()
			return err
		}
	}
	switch r.Verb {
	case "allow":
		for _, res := range r.Resources {
			p.Next++
			p.Rules = append(p.Rules, rule{Name: "rule-" + strconv.Itoa(p.Next), Sandbox: r.Sandbox, Decision: "allow", Resource: res})
			fmt.Printf("Added allow rule rule-%d for %s\n", p.Next, res)
		}
	case "rm":
		// Strict where the docs are silent: a filter that matches no
		// rule is an error, not a quiet success.
		match := func(x rule, res string) bool {
			return x.Sandbox == r.Sandbox && (r.ID == "" || x.Name == r.ID) && (res == "" || x.Resource == res)
		}
		resources := r.Resources
		if len(resources) == 0 {
			resources = []string{""}
		}
		for _, res := range resources {
			n := len(p.Rules)
			p.Rules = slicesDelete(p.Rules, func(x rule) bool { return match(x, res) })
			if len(p.Rules) == n {
				unlock()
				return fmt.Errorf("no rule matches --id %q --resource %q in scope %s", r.ID, res, scopeName(r.Sandbox))
			}
			fmt.Printf("Removed %d rule(s)\n", n-len(p.Rules))
		}
	}
	err = writeJSON(e.path("policy.json"), p)
	unlock()
	if err != nil {
		return err
	}
	// Tell running forwarders, and wait until they listen: a rule is in
	// force when this returns.
	ss, _ := e.sandboxes()
	for _, s := range ss {
		if r.Sandbox != "" && s.Name != r.Sandbox {
			continue
		}
		if c, err := net.DialTimeout("unix", e.sockPath(s.Name), time.Second); err == nil {
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintln(c, "sync")
			_, _ = bufio.NewReader(c).ReadString('\n')
			c.Close()
		}
	}
	return nil
}

func scopeName(s string) string {
	if s == "" {
		return "global"
	}
	return "sandbox:" + s
}

func slicesDelete(rs []rule, del func(rule) bool) []rule {
	out := rs[:0]
	for _, r := range rs {
		if !del(r) {
			out = append(out, r)
		}
	}
	return out
}

func (e *emu) template(args []string) (int, error) {
	if len(args) == 0 {
		return 1, errors.New("usage: sbx template load FILE | sbx template ls")
	}
	switch args[0] {
	case "ls":
		var ts []string
		_ = readJSON(e.path("templates.json"), &ts)
		fmt.Println("TEMPLATE")
		for _, t := range ts {
			fmt.Println(t)
		}
		return 0, nil
	case "load":
		if len(args) != 2 {
			return 1, errors.New(`"sbx template load" requires exactly 1 argument: FILE.tar (from docker image save)`)
		}
		out, err := docker("load", "--input", args[1])
		if err != nil {
			return 1, err
		}
		var loaded []string
		for _, line := range strings.Split(out, "\n") {
			if n, ok := strings.CutPrefix(strings.TrimSpace(line), "Loaded image: "); ok {
				loaded = append(loaded, n)
			}
		}
		if len(loaded) == 0 {
			return 1, fmt.Errorf("%s holds no tagged image (save it with: docker image save NAME:TAG -o FILE.tar)", args[1])
		}
		defer e.lock()()
		var ts []string
		_ = readJSON(e.path("templates.json"), &ts)
		for _, n := range loaded {
			if !contains(ts, n) {
				ts = append(ts, n)
			}
			fmt.Printf("Loaded template %s\n", n)
		}
		return 0, writeJSON(e.path("templates.json"), ts)
	}
	return 1, fmt.Errorf("unknown command %q for \"sbx template\"", args[0])
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
