package sbx

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeSbx is a scripted sbx: it records every call (argv and stdin) and
// answers by the argv's first words.
type fakeSbx struct {
	calls   [][]string
	stdins  []string
	answers map[string]answer // key: the argv joined by " ", or a prefix ending in "*"
}

type answer struct {
	out string
	err error
}

func (f *fakeSbx) Run(_ context.Context, args []string, stdin io.Reader) ([]byte, error) {
	f.calls = append(f.calls, args)
	in := ""
	if stdin != nil {
		b, _ := io.ReadAll(stdin)
		in = string(b)
	}
	f.stdins = append(f.stdins, in)
	key := strings.Join(args, " ")
	if a, ok := f.answers[key]; ok {
		return []byte(a.out), a.err
	}
	for k, a := range f.answers {
		if p, ok := strings.CutSuffix(k, "*"); ok && strings.HasPrefix(key, p) {
			return []byte(a.out), a.err
		}
	}
	return nil, nil
}

const scopedHelp = "Flags:\n  -g, --global   all\n      --sandbox string   one sandbox\n"

// preflightAnswers are a CLI that is set up: its version, no
// sandboxes, a rule listing, and rules scoped with --sandbox.
func preflightAnswers() map[string]answer {
	return map[string]answer{
		"version":                     {out: "sbx version v0.9.1\n"},
		"ls --json":                   {out: `{"sandboxes":[]}`},
		"policy ls":                   {out: policyLsRules},
		"policy allow network --help": {out: scopedHelp},
	}
}

func TestPreflight(t *testing.T) {
	f := &fakeSbx{answers: preflightAnswers()}
	d := &Driver{Run: f}
	dl, err := d.Preflight(context.Background(), true)
	if err != nil || dl != (Dialect{Version: "sbx version v0.9.1", Scoped: true}) {
		t.Fatalf("Preflight = %+v, %v", dl, err)
	}
	want := [][]string{{"version"}, {"ls", "--json"}, {"policy", "ls"}, {"policy", "allow", "network", "--help"}}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("calls = %q, want %q", f.calls, want)
	}

	// The current CLI: global rules only, the rules with --wide.
	ans := preflightAnswers()
	ans["policy ls"] = answer{out: policyLsSummary}
	ans["policy ls --wide"] = answer{out: policyLsWide}
	ans["policy allow network --help"] = answer{out: "Usage:\n  sbx policy allow network RESOURCES\n"}
	d = &Driver{Run: &fakeSbx{answers: ans}}
	if _, err := d.Preflight(context.Background(), true); !errors.Is(err, ErrNoScope) {
		t.Errorf("Preflight without scope = %v, want ErrNoScope", err)
	}
	if dl, err := d.Preflight(context.Background(), false); err != nil || dl.Scoped || !dl.Wide {
		t.Errorf("Preflight without ports = %+v, %v", dl, err)
	}

	// First use and an unreadable listing: each one line saying what to run.
	for _, tc := range []struct {
		what, key string
		a         answer
		want      string
	}{
		{"sbx ls fails", "ls*", answer{err: errors.New("sbx ls: exit status 1: daemon not running")}, "daemon not running"},
		{"not signed in", "ls*", answer{err: errors.New("sbx ls: exit status 1: not signed in")}, "`sbx login`"},
		{"no default policy", "policy ls", answer{err: errors.New("sbx policy ls: exit status 1: no default network policy chosen")}, "`sbx policy set-default balanced`"},
		{"a listing it cannot read", "policy ls", answer{out: "ID   WHAT\n"}, "no header"},
		{"a summary even with --wide", "policy ls*", answer{out: policyLsSummary}, "printed the summary again"},
	} {
		ans := preflightAnswers()
		if tc.key == "ls*" {
			delete(ans, "ls --json")
		}
		if tc.key == "policy ls*" {
			delete(ans, "policy ls")
		}
		ans[tc.key] = tc.a
		_, err := (&Driver{Run: &fakeSbx{answers: ans}}).Preflight(context.Background(), false)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Preflight = %v, want one line with %q", tc.what, err, tc.want)
		}
	}
}

func TestCallTimeout(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{versionArgs(), 15 * time.Second},
		{lsArgs(true), 30 * time.Second},
		{policyLsArgs(true), 30 * time.Second},
		{policyAllowArgs("n", 1), 30 * time.Second},
		{createArgs(CreateConfig{Name: "n", Template: "t"}), 5 * time.Minute},
		{NonceReadArgs("n"), 2 * time.Minute},
		{rmArgs("n"), 2 * time.Minute},
		{templateLoadArgs("/t.tar"), 10 * time.Minute},
		{templateLsArgs(), 30 * time.Second},
	} {
		if got := callTimeout(tc.args); got != tc.want {
			t.Errorf("callTimeout(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// A wedged CLI: the call ends at its bound with one line that says so,
// and the CLI (and a child holding its output) is not waited for.
func TestCLITimeout(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the wedged CLI is a shell script")
	}
	bin := filepath.Join(t.TempDir(), "sbx")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nsleep 60 &\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, err := CLI{Bin: bin, Timeout: 300 * time.Millisecond}.Run(context.Background(), lsArgs(true), nil)
	took := time.Since(t0)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "sbx ls: no answer in time within 300ms") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Run = %v, want the one-line timeout", err)
	}
	if took > 20*time.Second {
		t.Errorf("the timed-out call took %v", took)
	}
}

func TestListFallsBackToTable(t *testing.T) {
	f := &fakeSbx{answers: map[string]answer{
		"ls --json": {err: errors.New("unknown flag: --json")},
		"ls":        {out: "SANDBOX   STATUS\ndw-a      running\n"},
	}}
	got, err := (&Driver{Run: f}).List(context.Background())
	if err != nil || !reflect.DeepEqual(got, []Sandbox{{"dw-a", "running"}}) {
		t.Fatalf("List = %+v, %v", got, err)
	}
}

func TestCreate(t *testing.T) {
	const name = "dw-ci-20261130-151001-0123abcd"
	const nonce = "00112233445566778899aabbccddeeff"
	f := &fakeSbx{}
	d := &Driver{Run: f}
	c := CreateConfig{Name: name, Template: "tmpl:v1", Workspaces: []Workspace{{Path: "/w"}}}
	if err := d.Create(context.Background(), c, nonce, []int{8080, 9090}); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		createArgs(c),
		NonceWriteArgs(name),
		watcherCheckArgs(name, DefaultWatcherPath),
		policyAllowArgs(name, 8080),
		policyAllowArgs(name, 9090),
	}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("calls:\n got  %q\n want %q", f.calls, want)
	}
	// The nonce goes on stdin, never into an argv.
	if f.stdins[1] != nonce+"\n" {
		t.Errorf("nonce write's stdin = %q", f.stdins[1])
	}
	for _, a := range f.calls {
		if strings.Contains(strings.Join(a, " "), nonce) {
			t.Errorf("the nonce is in an argv: %q", a)
		}
	}

	// A create that fails while the template is not listed: the
	// template's (242); listed, or the listing unknown: not blamed on it.
	for _, tc := range []struct {
		list   answer
		absent bool
	}{
		{answer{out: "TEMPLATE\nother:1\n"}, true},
		{answer{out: "TEMPLATE\ntmpl:v1\n"}, false},
		{answer{err: errors.New("unknown command")}, false},
		{answer{out: "WHAT\n"}, false},
	} {
		f := &fakeSbx{answers: map[string]answer{"create*": {err: errors.New("create failed")}, "template ls": tc.list}}
		err := (&Driver{Run: f}).Create(context.Background(), c, nonce, nil)
		if err == nil || errors.Is(err, ErrNoTemplate) != tc.absent {
			t.Errorf("Create with template ls %+v = %v; template missing: want %v", tc.list, err, tc.absent)
		}
	}

	// A template without the watcher stops before any rule is made.
	f = &fakeSbx{answers: map[string]answer{"exec -u root " + name + " " + DefaultWatcherPath + " --version": {err: errors.New("exec: not found")}}}
	err := (&Driver{Run: f}).Create(context.Background(), c, nonce, []int{8080})
	if err == nil || !strings.Contains(err.Error(), "does not carry the watcher") {
		t.Errorf("Create with a template lacking the watcher = %v", err)
	}
	for _, a := range f.calls {
		if a[0] == "policy" {
			t.Errorf("a rule was made after the watcher check failed: %q", a)
		}
	}
}

func TestRemove(t *testing.T) {
	const name = "dw-ci-20261130-151001-0123abcd"
	policyHeader := "NAME     TYPE      ORIGIN                                      DECISION   STATUS   RESOURCES\n"
	ctx := context.Background()

	// The normal case: rules, then the sandbox; the listings show both gone.
	f := &fakeSbx{answers: map[string]answer{
		"ls --json": {out: `[{"name":"dw-other-20261130-151001-0123abcd","status":"running"}]`},
		"policy ls": {out: policyHeader + "rule-1   network   sandbox:dw-other-20261130-151001-0123abcd   allow      active   localhost:8080\n"},
	}}
	if err := (&Driver{Run: f}).Remove(ctx, name, []int{8080}); err != nil {
		t.Fatalf("Remove = %v", err)
	}
	want := [][]string{policyRmArgs(name, 8080), rmArgs(name), lsArgs(true), policyLsArgs(false)}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("calls:\n got  %q\n want %q", f.calls, want)
	}

	// Already gone: the failures are forgiven because nothing is left.
	f = &fakeSbx{answers: map[string]answer{
		"policy rm*": {err: errors.New("no rule")},
		"rm*":        {err: errors.New("sandbox not found")},
		"ls --json":  {out: `{"sandboxes":[]}`},
		"policy ls":  {out: policyHeader},
	}}
	if err := (&Driver{Run: f}).Remove(ctx, name, []int{8080}); err != nil {
		t.Errorf("Remove of what is gone = %v", err)
	}

	// Still there: an error names what is left.
	f = &fakeSbx{answers: map[string]answer{
		"rm*":       {err: errors.New("daemon busy")},
		"ls --json": {out: `[{"name":"` + name + `","status":"running"}]`},
		"policy ls": {out: policyHeader + "rule-1   network   sandbox:" + name + "   allow      active   localhost:8080\n"},
	}}
	err := (&Driver{Run: f}).Remove(ctx, name, []int{8080})
	if err == nil || !strings.Contains(err.Error(), "still there after sbx rm") || !strings.Contains(err.Error(), "rule rule-1") {
		t.Errorf("Remove with leftovers = %v", err)
	}

	// A policy listing it cannot read proves nothing: an error, even
	// when every removal said it worked.
	for _, ls := range []string{"ID   WHAT\n", ""} {
		f = &fakeSbx{answers: map[string]answer{"ls --json": {out: `[]`}, "policy ls": {out: ls}}}
		if err := (&Driver{Run: f}).Remove(ctx, name, []int{8080}); err == nil || !strings.Contains(err.Error(), "list policy rules") {
			t.Errorf("Remove with policy ls %q = %v, want the unreadable listing", ls, err)
		}
	}
	// The current CLI: the summary, then the rules with --wide.
	f = &fakeSbx{answers: map[string]answer{"ls --json": {out: `[]`}, "policy ls": {out: policyLsSummary},
		"policy ls --wide": {out: strings.ReplaceAll(policyLsWide, "dw-a", name)}}}
	if err := (&Driver{Run: f}).Remove(ctx, name, []int{8080}); err == nil || !strings.Contains(err.Error(), "rule r-2 (localhost:8080)") {
		t.Errorf("Remove with the rule listed --wide = %v", err)
	}
}

func TestScopedPorts(t *testing.T) {
	const name = "dw-ci-20261130-151001-0123abcd"
	f := &fakeSbx{answers: map[string]answer{"policy ls": {out: "NAME     TYPE      ORIGIN                 DECISION   STATUS   RESOURCES\n" +
		"rule-1   network   sandbox:" + name + "   allow   active   localhost:8080\n" +
		"rule-2   network   sandbox:" + name + "   allow   active   api.example.com:443\n" +
		"rule-3   network   local                  allow   active   localhost:9090\n"}}}
	got, err := (&Driver{Run: f}).ScopedPorts(context.Background(), name)
	if err != nil || !reflect.DeepEqual(got, []int{8080}) {
		t.Errorf("ScopedPorts = %v, %v", got, err)
	}
}

func TestErrorLine(t *testing.T) {
	for in, want := range map[string]string{
		"Choose a default network policy:\n  1. Open\npress 1-3: \nERROR: no default network policy chosen\n": "ERROR: no default network policy chosen",
		"daemon not\nrunning\n": "daemon not running",
		"":                      "",
	} {
		if got := errorLine(in); got != want {
			t.Errorf("errorLine(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestVerb(t *testing.T) {
	for args, want := range map[string]string{
		"policy allow network --sandbox x localhost:1": "policy allow network",
		"exec -i -u root box /w --control=stdin":       "exec",
		"rm --force box":                               "rm",
	} {
		if got := verb(strings.Fields(args)); got != want {
			t.Errorf("verb(%q) = %q, want %q", args, got, want)
		}
	}
}
