package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/controller"
	boxcopy "deathwatch/supervisor/copy"
	"deathwatch/supervisor/exitcode"
)

func parseExec(t *testing.T, args []string, env map[string]string) (*supervisor.ExecOptions, error) {
	t.Helper()
	var cli CLI
	var out, errb bytes.Buffer
	c := &cmdContext{stdout: &out, stderr: &errb, getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	p, err := newParser(&cli, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(args); err != nil {
		return nil, err
	}
	return cli.Exec.options(&cli.Globals, c)
}

func TestExecOptions(t *testing.T) {
	w := filepath.Join(t.TempDir(), "watcher")
	os.WriteFile(w, []byte("x"), 0o755)
	src := t.TempDir()
	o, err := parseExec(t, []string{"--instance", "ci", "--journal", "/j", "exec", "--runtime", "podman", "--image", "img",
		"--name", "job", "--label", "team=a,b", "--run-key", "run-1", "--env", "TOKEN", "--workdir", "/work",
		"--mount", src + ":/data:ro", "--memory", "512m", "--pids-limit", "64", "--network", "bridge",
		"--deadline", "1m", "--grace", "3s", "--heartbeat", "3s", "--watcher", w, "--user", "1001:1002",
		"--", "sh", "-c", "echo --not-a-flag"}, map[string]string{"TOKEN": "v"})
	if err != nil {
		t.Fatal(err)
	}
	want := &supervisor.ExecOptions{
		Instance: "ci", JournalDir: "/j", Runtime: "podman", Image: "img", NamePrefix: "job",
		Labels: map[string]string{"team": "a,b"}, RunKey: "run-1", AgentEnv: []string{"TOKEN=v"}, Workdir: "/work",
		Mounts: []supervisor.Mount{{Source: src, Target: "/data", ReadOnly: true}}, Memory: 512 << 20, PidsLimit: 64,
		Network: "bridge", NetworkSet: true, Deadline: time.Minute, Grace: 3 * time.Second, Heartbeat: 3 * time.Second,
		WatcherPath: w, UID: 1001, GID: 1002, Argv: []string{"sh", "-c", "echo --not-a-flag"},
		Controller: controller.Spec{Parent: true}, // the CLI watches its parent by default
	}
	// The copy party rides along, with no copies.
	if len(o.Parties) != 1 || !reflect.DeepEqual(copies(o).Options, boxcopy.Options{}) {
		t.Errorf("parties %v: want the copy party alone, with no copies", o.Parties)
	}
	o.Parties = nil
	if !reflect.DeepEqual(o, want) {
		t.Errorf("options\n got %+v\nwant %+v", o, want)
	}
}

func TestExecOptionsRefused(t *testing.T) {
	w := filepath.Join(t.TempDir(), "watcher")
	os.WriteFile(w, []byte("x"), 0o755)
	const secret = "hunter2-secret"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--env", "TOKEN=" + secret}, "pass only the NAME"},
		{[]string{"--env", "UNSET_VAR"}, "not set"},
		{[]string{"--label", "io.deathwatch.nonce=x"}, "reserved"},
		{[]string{"--label", "novalue"}, "KEY=VALUE"},
		{[]string{"--mount", "relative:/x"}, "absolute"},
		{[]string{"--mount", "/nonexistent-src:/x"}, "no such file"},
		{[]string{"--memory", "lots"}, "--memory"},
		{[]string{"--user", "root"}, "UID:GID"},
		{[]string{"--workdir", "work"}, "absolute"},
		{[]string{"--name", "bad/name"}, "--name"},
		{[]string{"--watcher", "/nonexistent/watcher"}, "--watcher"},
		{[]string{"--heartbeat", "1ms"}, "too short"},
	} {
		args := append([]string{"exec", "--image", "i", "--watcher", w}, tc.args...)
		args = append(args, "--", "true")
		_, err := parseExec(t, args, map[string]string{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitcode.Of(err, 0) != shared.ExitUsage {
			t.Errorf("%v: err %v, want %q (usage)", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%v: the error shows the value", tc.args)
		}
	}
}

func TestCLIUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout
		err  string // in stderr (one line)
	}{
		{[]string{"--help"}, 0, "exec", ""},
		{[]string{"exec", "--help"}, 0, "245", ""},
		{[]string{"version"}, 0, shared.Version, ""},
		{[]string{"--version"}, 0, shared.Version, ""},
		{[]string{"version", "--json"}, 0, `"version":"` + shared.Version + `"`, ""},
		// Anything beside a plain version is the parser's.
		{[]string{"--log-level", "info", "version", "--json"}, 0, `"version":"` + shared.Version + `"`, ""},
		{[]string{"version", "--bogus"}, shared.ExitUsage, "", "unknown flag --bogus"},
		{[]string{"exec", "--bogus", "--", "true"}, shared.ExitUsage, "", "unknown flag --bogus"},
		{[]string{"exec", "--network", "wifi", "--", "true"}, shared.ExitUsage, "", "--network"},
		{[]string{"frobnicate"}, shared.ExitUsage, "", "unexpected argument frobnicate"},
		{[]string{"exec", "--deadline", "soon", "--", "true"}, shared.ExitUsage, "", "--deadline"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &cmdContext{stdout: &out, stderr: &errb, getenv: os.LookupEnv})
		if code != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("%v: code %d stdout %q", tc.args, code, out.String())
		}
		if tc.err != "" {
			s := strings.TrimSpace(errb.String())
			if strings.Count(s, "\n") != 0 || !strings.Contains(s, tc.err) {
				t.Errorf("%v: stderr %q, want one line with %q", tc.args, s, tc.err)
			}
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"512m": 512 << 20, "2g": 2 << 30, "2G": 2 << 30, "1gib": 1 << 30, "8388608": 8 << 20, "10240k": 10 << 20} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d %v", in, got, err)
		}
	}
	for _, in := range []string{"", "0", "-1m", "1m", "x", "9999999999999g"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}

func TestDoctorCLIRefusesBadFlags(t *testing.T) {
	var out, errb strings.Builder
	c := &cmdContext{stdout: &out, stderr: &errb, getenv: func(string) (string, bool) { return "", false }}
	if code := run([]string{"doctor", "--posture", "sometimes"}, c); code != 240 {
		t.Errorf("bad posture: exit %d", code)
	}
	if code := run([]string{"doctor", "--trials", "0"}, c); code != 240 {
		t.Errorf("zero trials: exit %d", code)
	}
	if code := run([]string{"prove-deathwatch", "--trials", "0"}, c); code != 240 {
		t.Errorf("prove zero trials: exit %d", code)
	}
}

func TestReconcileCLI(t *testing.T) {
	dir := t.TempDir()
	var out, errb strings.Builder
	c := &cmdContext{stdout: &out, stderr: &errb, getenv: func(string) (string, bool) { return "", false }}
	code := run([]string{"--instance", "cli", "--journal", dir, "reconcile", "--json", "--runtime", "native"}, c)
	if code != 0 || !strings.Contains(out.String(), `"removed": []`) {
		t.Errorf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
}

// The runtime enums come from the registry: every registered runtime
// is accepted, anything else is a usage error that lists them.
func TestRuntimeEnumsFromRegistry(t *testing.T) {
	vars := runtimeVars()
	for _, n := range supervisor.RuntimeNames() {
		if !strings.Contains(","+vars["runtimes"]+",", ","+n+",") {
			t.Errorf("${runtimes} %q lacks %s", vars["runtimes"], n)
		}
	}
	var out, errb strings.Builder
	c := &cmdContext{stdout: &out, stderr: &errb, getenv: func(string) (string, bool) { return "", false }}
	if code := run([]string{"exec", "--runtime", "no-such", "--", "true"}, c); code != 240 || !strings.Contains(errb.String(), "docker") {
		t.Errorf("exec --runtime no-such: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"reconcile", "--runtime", "no-such"}, c); code != 240 {
		t.Errorf("reconcile --runtime no-such: exit %d, %q", code, errb.String())
	}
}

// exec bounds every box by default (issue 17): the flags' defaults are
// the library's, 0 on the command line is the explicit "off", and the
// help says so.
func TestExecDefaultBounds(t *testing.T) {
	w := filepath.Join(t.TempDir(), "watcher")
	os.WriteFile(w, []byte("x"), 0o755)
	for _, tc := range []struct {
		args                []string
		deadline, heartbeat time.Duration
	}{
		{nil, supervisor.DefaultDeadline, supervisor.DefaultHeartbeat},
		{[]string{"--deadline", "0"}, supervisor.Disabled, supervisor.DefaultHeartbeat},
		{[]string{"--heartbeat", "0"}, supervisor.DefaultDeadline, supervisor.Disabled},
		{[]string{"--heartbeat", "0", "--deadline", "0"}, supervisor.Disabled, supervisor.Disabled},
		{[]string{"--heartbeat", "2s", "--deadline", "5m"}, 5 * time.Minute, 2 * time.Second},
	} {
		args := append(append([]string{"exec", "--watcher", w}, tc.args...), "--", "true")
		o, err := parseExec(t, args, nil)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if o.Deadline != tc.deadline || o.Heartbeat != tc.heartbeat {
			t.Errorf("%v: deadline %v heartbeat %v, want %v %v", tc.args, o.Deadline, o.Heartbeat, tc.deadline, tc.heartbeat)
		}
	}
	if supervisor.DefaultGrace != 2*time.Second || supervisor.DefaultHeartbeat != 10*time.Second || supervisor.DefaultDeadline != time.Hour {
		t.Errorf("the flags' default tags (10s, 1h, 2s) no longer match the library's defaults")
	}
	var out, errb bytes.Buffer
	run([]string{"exec", "--help"}, &cmdContext{stdout: &out, stderr: &errb, getenv: os.LookupEnv})
	for _, want := range []string{"--deadline=1h", "--heartbeat=10s", "--grace=2s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("exec --help does not show %s:\n%s", want, out.String())
		}
	}
}

func TestPowerGroupRefused(t *testing.T) {
	groups := filepath.Join(t.TempDir(), "group")
	os.WriteFile(groups, []byte("root:x:0:\ndocker:x:999:alice\nstaff:x:50:\n"), 0o644)
	old := hostGroupFile
	hostGroupFile = groups
	t.Cleanup(func() { hostGroupFile = old })
	if g := powerGroup(999, groups); g != "docker" {
		t.Errorf("gid 999: %q, want docker", g)
	}
	if g := powerGroup(50, groups); g != "" {
		t.Errorf("gid 50: %q, want none", g)
	}
	w := filepath.Join(t.TempDir(), "watcher")
	os.WriteFile(w, []byte("x"), 0o755)
	_, err := parseExec(t, []string{"exec", "--runtime", "docker", "--image", "img", "--watcher", w, "--user", "1000:999", "--", "true"}, nil)
	if exitcode.Of(err, 0) != shared.ExitRefused || (err == nil || !strings.Contains(err.Error(), "group docker")) {
		t.Errorf("--user 1000:<docker>: %v, want refused naming the group", err)
	}
	if _, err := parseExec(t, []string{"exec", "--runtime", "native", "--watcher", w, "--user", "1000:999", "--", "true"}, nil); err != nil {
		t.Errorf("native maps the gid into the box's own range: %v", err)
	}
}

// TestExecCLIIsCLIs: `supervisor exec` parses with a parser of its own
// command only (execCLI); what it accepts, refuses and shows must be
// what the full CLI would: the same Exec field, the same help and
// errors, and commandOf finds exec wherever the globals put it.
func TestExecCLIIsCLIs(t *testing.T) {
	full, _ := reflect.TypeOf(CLI{}).FieldByName("Exec")
	own, _ := reflect.TypeOf(execCLI{}).FieldByName("Exec")
	if full.Tag != own.Tag || full.Type != own.Type {
		t.Errorf("execCLI.Exec %s %q, CLI.Exec %s %q: keep them alike", own.Type, own.Tag, full.Type, full.Tag)
	}
	// Every Globals flag that takes a value is in globalValueFlags.
	p, err := newParser(&CLI{}, &cmdContext{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range p.Model.Flags {
		if f.Name == "help" || f.IsBool() {
			continue
		}
		if !slices.Contains(globalValueFlags, "--"+f.Name) {
			t.Errorf("global flag --%s takes a value but is not in globalValueFlags", f.Name)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "--", "true"}, "exec"},
		{[]string{"--instance", "exec", "ls"}, "ls"},
		{[]string{"--instance=x", "--log-level", "debug", "exec"}, "exec"},
		{[]string{"--journal", "/j", "exec", "--", "ls"}, "exec"},
		{[]string{"--help"}, ""},
		{[]string{"--", "exec"}, ""},
		{nil, ""},
	} {
		if got := commandOf(tc.args); got != tc.want {
			t.Errorf("commandOf(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
	// The same words on stdout and stderr, and the same status, for
	// help and for bad input, whichever parser reads them.
	for _, args := range [][]string{
		{"exec", "--help"},
		{"--instance", "ci", "exec", "-h"},
		{"exec", "--no-such-flag", "--", "true"},
		{"exec", "--runtime", "nosuch", "--", "true"},
		{"exec", "--memory"},
		{"exec"},
	} {
		run1 := func(cli any, g *Globals) (int, string, string) {
			var out, errb bytes.Buffer
			c := &cmdContext{stdout: &out, stderr: &errb, getenv: func(string) (string, bool) { return "", false }}
			p, err := newParser(cli, c)
			if err != nil {
				t.Fatal(err)
			}
			code := 0
			func() {
				defer func() {
					if r := recover(); r != nil {
						code = r.(kongExit).code
					}
				}()
				if _, err := p.Parse(args); err != nil {
					code = -1
					errb.WriteString(err.Error())
				}
			}()
			return code, out.String(), errb.String()
		}
		e := &execCLI{}
		f := &CLI{}
		ec, eo, ee := run1(e, &e.Globals)
		fc, fo, fe := run1(f, &f.Globals)
		if ec != fc || eo != fo || ee != fe {
			t.Errorf("%q: exec-only parser says %d %q %q, the full one %d %q %q", args, ec, eo, ee, fc, fo, fe)
		}
	}
}

// TestLeanExecIsExec: an exec that asks for no help parses with the
// help text cut from execCLI's tags (leanExecType); what it accepts
// and refuses, and into what, must be what execCLI's parser says.
func TestLeanExecIsExec(t *testing.T) {
	w := filepath.Join(t.TempDir(), "watcher")
	os.WriteFile(w, []byte("x"), 0o755)
	env := map[string]string{"DEATHWATCH_RUNTIME": "native", "DEATHWATCH_IMAGE": "img", "DEATHWATCH_INSTANCE": "envi"}
	parsed := 0
	for _, args := range [][]string{
		{"exec", "--", "true"},
		{"--instance", "ci", "--journal", "/j", "--log-level", "debug", "--kube-context", "kc", "--kube-namespace", "kn", "exec", "--runtime", "podman", "--image", "img",
			"--name", "job", "--label", "team=a,b", "--run-key", "run-1", "--env", "TOKEN", "--workdir", "/work",
			"--mount", "/src:/data:ro", "--memory", "512m", "--pids-limit", "64", "--network", "bridge",
			"--deadline", "1m", "--grace", "3s", "--heartbeat", "3s", "--watcher", w, "--user", "1001:1002",
			"--host-port", "80", "--host-port", "81", "--copy-in", "/a:/b", "--copy-out", "/c:/d", "--copy-out-limit", "2g",
			"--copy-out-max-entries", "7", "--stage", "auto", "--allow-rootful", "--allow-userns", "-it",
			"--kube-node-selector", "a=b", "--kube-toleration", "t:NoSchedule", "--kube-runtime-class", "gvisor", "--kube-pull-never", "--kube-cpu-limit", "2",
			"--", "sh", "-c", "echo --help -h"},
		{"exec", "--template", "t", "--allow-host-network", "--events", "fd:3", "--watcher-in-image", "/w", "true", "--help"},
		{"exec", "--no-such-flag", "--", "true"},
		{"exec", "--runtime", "nosuch", "--", "true"},
		{"exec", "--stage", "nosuch", "--", "true"},
		{"exec", "--deadline", "soon", "--", "true"},
		{"exec", "--memory"},
		{"exec"},
	} {
		parse := func(cli any) (string, string) {
			var out, errb bytes.Buffer
			c := &cmdContext{stdout: &out, stderr: &errb, getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
			p, err := newParser(cli, c)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Parse(args); err != nil {
				errb.WriteString(err.Error())
			}
			return out.String(), errb.String()
		}
		full := &execCLI{}
		fo, fe := parse(full)
		lean := newLeanExec()
		lo, le := parse(lean.Interface())
		if lo != fo || le != fe {
			t.Errorf("%q: the lean parser says %q %q, execCLI's %q %q", args, lo, le, fo, fe)
		}
		if got := leanExec(lean); fe == "" && !reflect.DeepEqual(got, full) {
			t.Errorf("%q: the lean parser made\n%+v\nexecCLI's\n%+v", args, got, full)
		}
		if fe == "" {
			parsed++
		}
	}
	if parsed != 3 {
		t.Errorf("%d of the argument lists parsed, want 3", parsed)
	}
	for args, want := range map[string]bool{
		"exec --help": true, "exec -h": true, "exec -ih -- x": true, "--help exec": true, "exec --help=1": true,
		"exec -- --help": false, "exec -it -- sh -h": false, "exec --hint": false, "exec --": false,
	} {
		if got := asksHelp(strings.Fields(args)); got != want {
			t.Errorf("asksHelp(%q) = %v, want %v", args, got, want)
		}
	}
}

// BenchmarkLeanParse: the parser of `supervisor exec --runtime native
// -- /bin/true` as Main builds it, and its parse (-benchmem: the heap a
// native launch pays before anything is journaled), beside the parse
// into execCLI itself, help text and all (make bench's TestBenchCLIParse
// runs both, interleaved, and prints the ratio). "lean" builds the lean
// type on each round, as each process does once.
func BenchmarkLeanParse(b *testing.B) {
	args := []string{"exec", "--runtime", "native", "--watcher", "/x/watcher", "--", "/bin/true"}
	c := &cmdContext{stdout: io.Discard, stderr: io.Discard}
	parse := func(b *testing.B, cli any) {
		p, err := newParser(cli, c)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Parse(args); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("lean", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			lean := reflect.New(withoutHelp(reflect.TypeOf(execCLI{}), execVars(runtimeVars())))
			parse(b, lean.Interface())
			leanExec(lean)
		}
	})
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			parse(b, &execCLI{})
		}
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fastFlags = sync.OnceValue(buildFastFlags) // its table anew, as each process builds it once
			if _, ok := fastExec(args, os.LookupEnv); !ok {
				b.Fatal("fastExec did not parse it")
			}
		}
	})
}

// --tty gives the agent the caller's TERM, as docker -t does, unless
// its environment names one; without --tty it gets none.
func TestExecTTYTerm(t *testing.T) {
	w := filepath.Join(t.TempDir(), "watcher")
	os.WriteFile(w, []byte("x"), 0o755)
	env := map[string]string{"TERM": "xterm-256color", "MINE": "screen"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--tty"}, []string{"TERM=xterm-256color"}},
		{[]string{}, nil},
		{[]string{"--tty", "--env-file", "/dev/null"}, []string{"TERM=xterm-256color"}},
	} {
		args := append(append([]string{"exec", "--runtime", "native", "--watcher", w}, tc.args...), "--", "true")
		o, err := parseExec(t, args, env)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if !slices.Equal(o.AgentEnv, tc.want) {
			t.Errorf("%v: agent env %q, want %q", tc.args, o.AgentEnv, tc.want)
		}
	}
}

// A warning: line shows at --log-level warn and below, not at error;
// other lines always.
func TestSayerLogLevel(t *testing.T) {
	for _, tc := range []struct {
		level string
		want  string
	}{
		{"warn", "supervisor: warning: w\nsupervisor: said\n"},
		{"debug", "supervisor: warning: w\nsupervisor: said\n"},
		{"error", "supervisor: said\n"},
	} {
		var b bytes.Buffer
		say := (&Globals{LogLevel: tc.level}).sayer(&b)
		say("warning: w")
		say("said")
		if b.String() != tc.want {
			t.Errorf("--log-level %s: %q, want %q", tc.level, b.String(), tc.want)
		}
	}
}
