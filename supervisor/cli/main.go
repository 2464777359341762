// Package cli is the supervisor's command line (kong): one file per
// command, each turning its flags into the options of the library
// (supervisor.Exec, reconcile.Run) or of hostcheck (Prove, Doctor,
// RunDemo). The runtime enums come from the registry; runtimes.go holds
// the one import line per runtime.
package cli

import (
	"deathwatch/supervisor/journal"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/alecthomas/kong"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/internal/autohelp"
)

// Globals are the flags every command takes.
type Globals struct {
	Instance string `help:"Controller instance: boxes and journal entries carry it, ls and reconcile see only their own." env:"DEATHWATCH_INSTANCE" default:"${default_instance}"`
	Journal  string `help:"Journal directory (default /var/lib/deathwatch for root, else $XDG_STATE_HOME/deathwatch)." env:"DEATHWATCH_JOURNAL" placeholder:"DIR"`
	LogLevel string `help:"Log level of the supervisor's own messages on stderr, its warning: lines included: ${enum}." enum:"debug,info,warn,error" default:"warn"`

	Kube KubeGlobals `embed:"" prefix:"kube-"`
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

	// Runtime-specific commands.
	Kubernetes KubernetesCmd `cmd:"" help:"What the kubernetes runtime needs from a cluster (rbac)."`
}

// execCLI is CLI with the exec command alone. kong.New reflects over
// and interpolates the help of every command's flags on every start;
// `supervisor exec` (the hot path) builds the parser of its own command
// only. The tag of Exec is
// CLI's (TestExecCLIIsCLIs).
type execCLI struct {
	Globals

	Exec ExecCmd `cmd:"" help:"Run one agent command in a fresh box and exit with its status."`
}

// globalValueFlags are the Globals flags that take a value (as the next
// argument when not spelled --flag=value).
var globalValueFlags = []string{"--instance", "--journal", "--log-level", "--kube-context", "--kube-namespace", "--kube-pod-security"}

// commandOf is the command args name: the first argument that is
// neither a flag nor a global flag's value ("" when there is none).
func commandOf(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return ""
		case slices.Contains(globalValueFlags, a):
			i++
		case !strings.HasPrefix(a, "-"):
			return a
		}
	}
	return ""
}

// cmdContext carries the seams and the result through kong's Run.
type cmdContext struct {
	stdin          io.Reader // exec --stdin/--tty only
	stdout, stderr io.Writer
	signals        <-chan os.Signal
	// execSignals, when set, waits for exec's signals to be taken
	// (takeExecSignals) and returns their channel; Main sets it.
	execSignals func() <-chan os.Signal
	env         []string // nil: os.Environ()
	getenv      func(string) (string, bool)
	self        string // the supervisor's own path (for the default watcher)
	code        int
}

// print writes v as indented JSON when asJSON, else table(stdout).
func (c *cmdContext) print(asJSON bool, v any, table func(io.Writer)) error {
	if !asJSON {
		table(c.stdout)
		return nil
	}
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type kongExit struct{ code int }

// Main runs the supervisor with args (without the program name) and
// returns its exit status.
func Main(args []string) int {
	supervisor.Init() // a runtime's hidden mode (native: the idmap placeholder) ends here
	c := &cmdContext{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.LookupEnv}
	if commandOf(args) == "exec" {
		c.execSignals = takeExecSignals()
	}
	c.self, _ = os.Executable()
	return run(args, c)
}

// newParser builds the parser of cli, a *CLI, an *execCLI or a lean
// exec (newLeanExec).
func newParser(cli any, c *cmdContext) (*kong.Kong, error) {
	var vars kong.Vars // a lean exec's tags carry the variables' values already
	switch cli.(type) {
	case *execCLI:
		// kong interpolates every variable again for each flag
		// (Kong.interpolateValue): exec's parser gets the ones its
		// tags name only, the long ones (remove_bounds, auto_order)
		// not.
		vars = execVars(runtimeVars())
	case *CLI:
		vars = runtimeVars()
	}
	return kong.New(cli,
		kong.Name("supervisor"),
		kong.Description("deathwatch supervisor: runs agent commands in boxes that die with it."),
		kong.Writers(c.stdout, c.stderr),
		kong.Exit(func(code int) { panic(kongExit{code}) }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		vars,
	)
}

// leanExecType is execCLI's type with the help text cut from every tag
// and the variables of the others (${runtimes}) replaced by their
// values: kong parses each tag and runs its interpolation (a
// backtracking regexp) over each help text whether or not help is
// shown, and over each
// variable again for each flag (Kong.interpolateValue): the lean parser
// is given none. An exec that asks for no help parses into a value of
// this type (newLeanExec), converted back to execCLI (leanExec) field
// by field: the fields are execCLI's, in its order. (The runtimes
// register from their packages' init: the values are known here.)
var leanExecType = sync.OnceValue(func() reflect.Type {
	return withoutHelp(reflect.TypeOf(execCLI{}), execVars(runtimeVars()))
})

// execVars are the variables exec's tags name.
func execVars(all kong.Vars) kong.Vars {
	return kong.Vars{"runtimes": all["runtimes"], "runtimes_list": all["runtimes_list"], "auto_help": all["auto_help"]}.CloneWith(defaultVars())
}

var mapperValue = reflect.TypeFor[kong.MapperValue]()

// withoutHelp is t with no help tag, and each ${name} of vars in its
// other tags replaced by the value (a value a tag cannot hold as it is,
// one with a quote, a backslash or a $, panics: runtime names have
// none).
func withoutHelp(t reflect.Type, vars kong.Vars) reflect.Type {
	fs := make([]reflect.StructField, t.NumField())
	for i := range fs {
		f := t.Field(i)
		f.Tag = cutTag(f.Tag, "help")
		for name, v := range vars {
			if strings.ContainsAny(v, `"\$`) {
				panic("cli: variable " + name + " cannot go into a struct tag: " + v)
			}
			f.Tag = reflect.StructTag(strings.ReplaceAll(string(f.Tag), "${"+name+"}", v))
		}
		// Globals, ExecCmd: a struct that decodes itself (a kong
		// MapperValue) is a value, kept with its methods.
		if f.Type.Kind() == reflect.Struct && !reflect.PointerTo(f.Type).Implements(mapperValue) {
			if f.Anonymous {
				// reflect.StructOf makes no embedded fields of types
				// with methods: kong's embed tag flattens it the same.
				f.Anonymous = false
				f.Tag = reflect.StructTag(strings.TrimSpace(string(f.Tag) + ` embed:""`))
			}
			f.Type = withoutHelp(f.Type, vars)
		}
		fs[i] = f
	}
	return reflect.StructOf(fs)
}

// cutTag drops key:"..." from tag.
func cutTag(tag reflect.StructTag, key string) reflect.StructTag {
	s := string(tag)
	i := strings.Index(s, key+`:"`)
	if i < 0 || (i > 0 && s[i-1] != ' ') {
		return tag
	}
	j := i + len(key) + 2
	for j < len(s) && s[j] != '"' {
		if s[j] == '\\' {
			j++
		}
		j++
	}
	return reflect.StructTag(strings.TrimSpace(s[:i] + s[min(j+1, len(s)):]))
}

// newLeanExec is a fresh value of leanExecType, for newParser.
func newLeanExec() reflect.Value { return reflect.New(leanExecType()) }

// leanExec is the execCLI a lean exec parsed into.
func leanExec(v reflect.Value) *execCLI {
	e := &execCLI{}
	setFields(reflect.ValueOf(e).Elem(), v.Elem())
	return e
}

// setFields sets dst's fields from src's, a struct of withoutHelp's
// type, descending into the structs withoutHelp rewrote.
func setFields(dst, src reflect.Value) {
	for i := 0; i < dst.NumField(); i++ {
		d, s := dst.Field(i), src.Field(i)
		if d.Kind() == reflect.Struct && d.Type() != s.Type() && !s.Type().ConvertibleTo(d.Type()) {
			setFields(d, s)
			continue
		}
		d.Set(s.Convert(d.Type()))
	}
}

// asksHelp reports whether args could ask for help before "--" (--help,
// -h, or -h among clustered short flags): those take the parser with
// the help text.
func asksHelp(args []string) bool {
	for _, a := range args {
		switch {
		case a == "--":
			return false
		case a == "--help" || strings.HasPrefix(a, "--help="):
			return true
		case len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a, 'h'):
			return true
		}
	}
	return false
}

// runtimeVars are the kong variables that spell the registered
// runtimes: ${runtimes} (an enum), ${runtimes_list} (for help text),
// ${auto_help} (what auto picks) and ${auto_order}; ${retention} is
// the journal's default retention of closed entries.
func runtimeVars() kong.Vars {
	names := supervisor.RuntimeNames()
	list := strings.Join(names, ", ")
	if len(names) == 0 {
		list = "none"
	}
	return kong.Vars{
		"runtimes":      strings.Join(names, ","),
		"runtimes_list": list,
		"auto_help":     autohelp.Help(),
		"auto_order":    strings.Join(supervisor.AutoOrder(), ", then "),
		"default_prove": autohelp.Local(),
		"remove_bounds": removeBounds(),
		"retention":     journal.DefaultRetention.String(),
	}.CloneWith(defaultVars())
}

// defaultVars are the flags' defaults, the library's (one source).
func defaultVars() kong.Vars {
	return kong.Vars{
		"default_instance":  supervisor.DefaultInstance,
		"default_name":      supervisor.DefaultNamePrefix,
		"default_deadline":  supervisor.DefaultDeadline.String(),
		"default_grace":     supervisor.DefaultGrace.String(),
		"default_heartbeat": supervisor.DefaultHeartbeat.String(),
		"default_user":      supervisor.DefaultUser,
	}
}

// removeBounds lists the runtimes' default removal bounds for help.
func removeBounds() string {
	var parts []string
	for _, d := range supervisor.Descriptors() {
		parts = append(parts, d.Name+" "+d.Bounds.Removed.String())
	}
	return strings.Join(parts, ", ")
}

func run(args []string, c *cmdContext) (code int) {
	if v, ok := plainVersion(args); ok {
		// kong.New reflects over every command of CLI: a version needs none.
		v.Run(c)
		return 0
	}
	if commandOf(args) == "exec" && !asksHelp(args) {
		// kong reads the flags' variables from the process's
		// environment: so does fastExec.
		e, ok := fastExec(args, os.LookupEnv)
		if ok {
			return execParsed(e, c)
		}
	}
	var cli any
	var globals *Globals
	var lean reflect.Value // exec without help: parsed into leanExecType
	if commandOf(args) == "exec" && !asksHelp(args) {
		lean = newLeanExec()
		cli = lean.Interface()
	} else if commandOf(args) == "exec" {
		e := &execCLI{}
		cli, globals = e, &e.Globals
	} else {
		full := &CLI{}
		cli, globals = full, &full.Globals
	}
	p, err := newParser(cli, c)
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
	if lean.IsValid() {
		return execParsed(leanExec(lean), c)
	}
	c.env = globals.Kube.engineEnv(c.env)
	return c.status(kctx.Run(globals, c))
}

// execParsed runs the exec command e was parsed into.
func execParsed(e *execCLI, c *cmdContext) int {
	c.env = e.Kube.engineEnv(c.env)
	return c.status(e.Exec.Run(&e.Globals, c))
}

// status is the exit status of a command that returned err.
func (c *cmdContext) status(err error) int {
	if err != nil {
		fmt.Fprintf(c.stderr, "supervisor: %v\n", err)
		return exitcode.Of(err, shared.ExitSetupFailed)
	}
	return c.code
}

func (g *Globals) logger(w io.Writer) *slog.Logger {
	var lv slog.Level
	lv.UnmarshalText([]byte(g.LogLevel))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lv}))
}

// sayer prints the supervisor's lines for a person on w, each as
// "supervisor: …"; a warning only at --log-level warn or below.
func (g *Globals) sayer(w io.Writer) func(string) {
	var lv slog.Level
	lv.UnmarshalText([]byte(g.LogLevel))
	return func(line string) {
		if strings.HasPrefix(line, "warning:") && lv > slog.LevelWarn {
			return
		}
		fmt.Fprintf(w, "supervisor: %s\n", line)
	}
}

func (g *Globals) journalDir() string {
	if g.Journal != "" {
		return g.Journal
	}
	return journal.DefaultDir()
}
