package sbx

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
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

func TestPreflight(t *testing.T) {
	f := &fakeSbx{answers: map[string]answer{
		"version":                     {out: "sbx version v0.9.1\n"},
		"ls --json":                   {out: `{"sandboxes":[]}`},
		"policy allow network --help": {out: scopedHelp},
	}}
	d := &Driver{Run: f}
	v, err := d.Preflight(context.Background(), true)
	if err != nil || v != "sbx version v0.9.1" {
		t.Fatalf("Preflight = %q, %v", v, err)
	}
	want := [][]string{{"version"}, {"ls", "--json"}, {"policy", "allow", "network", "--help"}}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("calls = %q, want %q", f.calls, want)
	}

	// No scope: refused when ports are wanted, fine when not.
	f = &fakeSbx{answers: map[string]answer{"policy allow network --help": {out: "Usage:\n  sbx policy allow network RESOURCES\n"}}}
	d = &Driver{Run: f}
	if _, err := d.Preflight(context.Background(), true); !errors.Is(err, ErrNoScope) {
		t.Errorf("Preflight without scope = %v, want ErrNoScope", err)
	}
	if _, err := d.Preflight(context.Background(), false); err != nil {
		t.Errorf("Preflight without ports = %v", err)
	}

	// sbx ls fails: so does the preflight.
	f = &fakeSbx{answers: map[string]answer{"ls*": {err: errors.New("daemon not running")}}}
	if _, err := (&Driver{Run: f}).Preflight(context.Background(), false); err == nil {
		t.Error("Preflight passed with a failing sbx ls")
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
	if f.stdins[1] != nonce {
		t.Errorf("nonce write's stdin = %q", f.stdins[1])
	}
	for _, a := range f.calls {
		if strings.Contains(strings.Join(a, " "), nonce) {
			t.Errorf("the nonce is in an argv: %q", a)
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
	want := [][]string{policyRmArgs(name, 8080), rmArgs(name), lsArgs(true), policyLsArgs()}
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

	// An unreadable policy listing: the rule removal's own failure stands.
	f = &fakeSbx{answers: map[string]answer{
		"policy rm*": {err: errors.New("daemon busy")},
		"ls --json":  {out: `[]`},
		"policy ls":  {out: "POLICY   SOURCE   APPLIES TO   SUMMARY\n"},
	}}
	if err := (&Driver{Run: f}).Remove(ctx, name, []int{8080}); err == nil {
		t.Error("Remove forgave a failed rule removal it could not check")
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
