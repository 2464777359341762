package main

// The switches that make the emulator an older or newer spelling of
// the CLI, or a product that misbehaves, and the first-use state (the
// sign-in and the default network policy) every daemon verb needs.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// The emulator's switches, environment variables of its caller.
const (
	// EnvPolicyScope=sandbox: `policy allow|rm network` take --sandbox
	// NAME (a rule of one sandbox). Default: no --sandbox, every rule
	// applies to all sandboxes, as the current reference documents.
	EnvPolicyScope = "SBXEMU_POLICY_SCOPE"
	// EnvPolicyLs picks the `policy ls` table: summary (default, the
	// current POLICY SOURCE APPLIES TO SUMMARY, rules only with --wide),
	// rules (the older NAME TYPE ORIGIN DECISION STATUS RESOURCES) or
	// provenance (PROVENANCE APPLIES_TO POLICY/RULE TYPE DECISION RESOURCES).
	EnvPolicyLs = "SBXEMU_POLICY_LS"
	// EnvExecEOF=lost: the end of an `sbx exec -i` client (its death,
	// or its stdin's end) never reaches the process in the sandbox,
	// whose stdin stays open until it exits.
	EnvExecEOF = "SBXEMU_EXEC_EOF"
	// EnvIdleStop is how long a running sandbox with no exec session
	// lives before it stops by itself (a Go duration; default 30s, as
	// the product; 0 never).
	EnvIdleStop = "SBXEMU_IDLE_STOP"
	// EnvBootDelay is how long starting a stopped sandbox takes
	// (default 300ms).
	EnvBootDelay = "SBXEMU_BOOT_DELAY"
	// EnvWedge=1: the daemon answers nothing; every verb but version,
	// login and logout waits for ever.
	EnvWedge = "SBXEMU_WEDGE"
)

// mode is the switches as read once per call.
type mode struct {
	scoped    bool
	policyLs  string // summary | rules | provenance
	eofLost   bool
	idleStop  time.Duration
	bootDelay time.Duration
	wedged    bool
	noInput   bool // the global --no-input
}

func readMode() (mode, error) {
	m := mode{scoped: os.Getenv(EnvPolicyScope) == "sandbox", policyLs: os.Getenv(EnvPolicyLs),
		eofLost: os.Getenv(EnvExecEOF) == "lost", wedged: os.Getenv(EnvWedge) == "1",
		idleStop: 30 * time.Second, bootDelay: 300 * time.Millisecond}
	switch m.policyLs {
	case "":
		m.policyLs = "summary"
	case "summary", "rules", "provenance":
	default:
		return m, fmt.Errorf("%s=%q: give summary, rules or provenance", EnvPolicyLs, m.policyLs)
	}
	for env, d := range map[string]*time.Duration{EnvIdleStop: &m.idleStop, EnvBootDelay: &m.bootDelay} {
		if v := os.Getenv(env); v != "" {
			n, err := time.ParseDuration(v)
			if err != nil || n < 0 {
				return m, fmt.Errorf("%s=%q: give a duration such as 2s", env, v)
			}
			*d = n
		}
	}
	return m, nil
}

// globalFlags takes the global flags before the verb (--no-input).
func globalFlags(args []string, m *mode) []string {
	for len(args) > 0 && args[0] == "--no-input" {
		m.noInput = true
		args = args[1:]
	}
	return args
}

// needsDaemon reports whether the verb talks to the daemon (all but the
// CLI's own: version, login, logout, help).
func needsDaemon(args []string) bool {
	if len(args) == 0 {
		return false
	}
	for _, a := range args {
		if a == "--help" || a == "-h" {
			return false
		}
	}
	switch args[0] {
	case "version", "login", "logout":
		return false
	case "policy":
		// Choosing the default is what answers the first-start prompt.
		return !(len(args) > 1 && (args[1] == "set-default" || args[1] == "init" || args[1] == "reset"))
	}
	return true
}

// wedge waits for ever: a daemon that accepted the call and never answers.
func wedge() {
	for {
		time.Sleep(time.Hour)
	}
}

const loginFile = "login.json"

type login struct {
	User string `json:"user"`
}

// firstUse is what the daemon asks before its first verb: a signed-in
// user, then a default network policy. Without one it prompts on the
// terminal; with --no-input, or when its stdin ends, it fails and says
// what to run. A stdin that stays open and silent waits for ever, as a
// prompt does.
func (e *emu) firstUse() error {
	var l login
	if err := readJSON(e.path(loginFile), &l); err != nil || l.User == "" {
		return errors.New("not signed in: run sbx login")
	}
	p, err := e.policyFile()
	if err != nil {
		return err
	}
	if p.Default != "" {
		return nil
	}
	const what = "no default network policy chosen: run sbx policy set-default balanced (or: sbx policy init balanced)"
	if e.mode.noInput {
		return errors.New(what)
	}
	fmt.Fprint(os.Stderr, "Choose a default network policy:\n\n     1. Open         — All network traffic allowed, no restrictions.\n"+
		"     2. Balanced     — Default deny, with common dev sites allowed.\n     3. Locked Down  — All network traffic blocked unless you allow it.\n\n  press 1–3: ")
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	fmt.Fprintln(os.Stderr)
	choice := map[string]string{"1": "allow-all", "2": "balanced", "3": "deny-all"}[strings.TrimSpace(line)]
	if choice == "" {
		if err != nil {
			return errors.New(what + " (the prompt read the end of stdin)")
		}
		return fmt.Errorf("%q is not 1, 2 or 3; %s", strings.TrimSpace(line), what)
	}
	return e.setDefault(choice, false)
}

// setDefault records the default network policy: set-default replaces
// it, init only sets the first one.
func (e *emu) setDefault(preset string, initOnly bool) error {
	switch preset {
	case "allow-all", "balanced", "deny-all":
	default:
		return fmt.Errorf("unknown policy %q: give allow-all, balanced or deny-all", preset)
	}
	defer e.lock()()
	p, err := e.policyFile()
	if err != nil {
		return err
	}
	if initOnly && p.Default != "" {
		return fmt.Errorf("the global network policy is already initialized (%s); run sbx policy reset to start over", p.Default)
	}
	p.Default = preset
	return writeJSON(e.path("policy.json"), p)
}

func (e *emu) login(args []string) (int, error) {
	if len(args) != 0 {
		return 1, errors.New(`"sbx login" takes no arguments`)
	}
	if err := writeJSON(e.path(loginFile), login{User: "ktest"}); err != nil {
		return 1, err
	}
	fmt.Println("Signed in as ktest")
	return 0, nil
}

func (e *emu) logout() (int, error) {
	if err := os.Remove(e.path(loginFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 1, err
	}
	fmt.Println("Signed out")
	return 0, nil
}
