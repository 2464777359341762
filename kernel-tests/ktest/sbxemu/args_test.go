package main

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseCreate(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    createReq
		wantErr string
	}{
		{args: []string{"shell", "/w", "/b:ro", "--name", "dw-x", "--template", "img:1", "--memory", "512m"},
			want: createReq{Agent: "shell", Name: "dw-x", Template: "img:1", Memory: "512m",
				Workspaces: []workspace{{Path: "/w"}, {Path: "/b", ReadOnly: true}}}},
		{args: []string{"--template=t", "-e", "A=1", "-eB", "claude", "/Work"},
			want: createReq{Agent: "claude", Name: "claude-Work", Template: "t", EnvNames: []string{"A", "B"},
				Workspaces: []workspace{{Path: "/Work"}}}},
		{args: []string{"shell", "--template", "t"}, wantErr: "requires a workspace"},
		{args: []string{"shell", "/w", "--template", "t", "--name", "a+b.c-D"},
			want: createReq{Agent: "shell", Name: "a+b.c-D", Template: "t", Workspaces: []workspace{{Path: "/w"}}}},
		{args: []string{"shell", "/w", "--template", "t", "--memory", "1073741824"}, wantErr: "binary units"},
		{args: []string{"shell", "/src:/work", "--template", "t"}, wantErr: "no SOURCE:TARGET"},
		{args: []string{"shell", "rel", "--template", "t"}, wantErr: "absolute"},
		{args: []string{"shell", "/a/../b", "--template", "t"}, wantErr: "absolute, clean"},
		{args: []string{"nosuch", "--template", "t"}, wantErr: "unknown agent"},
		{args: []string{"shell"}, wantErr: "--template"},
		{args: []string{"shell", "/w", "--template", "t", "--name", "Bad_Name"}, wantErr: "invalid sandbox name"},
		{args: []string{"shell", "/w", "--template", "t", "--memory", "lots"}, wantErr: "invalid --memory"},
		{args: []string{"shell", "/w", "--template", "t", "--network", "host"}, wantErr: "unknown flag: --network"},
		{args: []string{}, wantErr: "requires an agent"},
	} {
		got, err := parseCreate(tc.args)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseCreate(%q) error = %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseCreate(%q) = %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
}

func TestParseExec(t *testing.T) {
	got, err := parseExec([]string{"-it", "-e", "K", "-u", "root", "-w", "/work", "box", "/w", "--control=stdin", "-i"})
	want := execReq{Interactive: true, TTY: true, Env: []string{"K"}, User: "root", Workdir: "/work",
		Name: "box", Argv: []string{"/w", "--control=stdin", "-i"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("parseExec = %+v, %v; want %+v", got, err, want)
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"box"}, "at least 2"},
		{[]string{"-w", "rel", "box", "ls"}, "not absolute"},
		{[]string{"--user-ns", "box", "ls"}, "unknown flag"},
		{[]string{"-ix", "box", "ls"}, "unknown shorthand"},
		{[]string{"-u"}, "needs an argument"},
	} {
		if _, err := parseExec(tc.args); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("parseExec(%q) error = %v, want %q", tc.args, err, tc.wantErr)
		}
	}
}

func TestParseRm(t *testing.T) {
	got, err := parseRm([]string{"--force", "a", "b"})
	if err != nil || !got.Force || !reflect.DeepEqual(got.Names, []string{"a", "b"}) {
		t.Fatalf("parseRm = %+v, %v", got, err)
	}
	if got, err := parseRm([]string{"--all", "-f"}); err != nil || !got.All || !got.Force {
		t.Fatalf("parseRm(--all -f) = %+v, %v", got, err)
	}
	for _, bad := range [][]string{nil, {"--all", "a"}} {
		if _, err := parseRm(bad); err == nil {
			t.Errorf("parseRm(%q) succeeded", bad)
		}
	}
}

func TestParsePolicyNetwork(t *testing.T) {
	got, err := parsePolicyNetwork("allow", []string{"--sandbox", "box", "localhost:8080,*.example.com"}, true)
	if err != nil || got.Sandbox != "box" || !reflect.DeepEqual(got.Resources, []string{"localhost:8080", "*.example.com"}) {
		t.Fatalf("parsePolicyNetwork = %+v, %v", got, err)
	}
	if _, err := parsePolicyNetwork("allow", []string{"--sandbox", "box", "localhost:1"}, false); err == nil ||
		!strings.Contains(err.Error(), "unknown flag: --sandbox") {
		t.Errorf("an unscoped CLI accepted --sandbox: %v", err)
	}
	for _, bad := range [][]string{{"localhost:0"}, {"localhost:x"}, {"a b"}, {}, {"-g", "--sandbox", "b", "x"}} {
		if _, err := parsePolicyNetwork("allow", bad, true); err == nil {
			t.Errorf("parsePolicyNetwork(%q) succeeded", bad)
		}
	}
	// rm names the rule with --id and/or --resource (the reference), never a positional.
	got, err = parsePolicyNetwork("rm", []string{"--sandbox", "box", "--resource", "localhost:8080,localhost:9090"}, true)
	if err != nil || !reflect.DeepEqual(got.Resources, []string{"localhost:8080", "localhost:9090"}) {
		t.Errorf("policy rm --resource = %+v, %v", got, err)
	}
	if got, err := parsePolicyNetwork("rm", []string{"--id", "rule-3"}, true); err != nil || got.ID != "rule-3" {
		t.Errorf("policy rm --id = %+v, %v", got, err)
	}
	for _, bad := range [][]string{{"localhost:8080"}, {"--sandbox", "box"}} {
		if _, err := parsePolicyNetwork("rm", bad, true); err == nil {
			t.Errorf("policy rm %q succeeded", bad)
		}
	}
}

func TestRuleMatches(t *testing.T) {
	for _, tc := range []struct {
		res, host string
		port      int
		want      bool
	}{
		{"localhost:8080", "localhost", 8080, true},
		{"localhost:8080", "localhost", 8081, false},
		{"localhost", "localhost", 9, true},
		{"**", "localhost", 9, true},
		// The proxy rewrote host.docker.internal to localhost: a rule
		// naming host.docker.internal never matches.
		{"host.docker.internal:8080", "localhost", 8080, false},
		{"*.example.com", "api.example.com", 443, true},
		{"*.example.com", "example.com", 443, false},
	} {
		if got := ruleMatches(tc.res, tc.host, tc.port); got != tc.want {
			t.Errorf("ruleMatches(%q, %q, %d) = %v, want %v", tc.res, tc.host, tc.port, got, tc.want)
		}
	}
}

func TestParsePolicyLs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		wide bool
		ok   bool
	}{
		{nil, false, true}, {[]string{"--wide"}, true, true}, {[]string{"--type", "network", "--include-inactive"}, false, true},
		{[]string{"--type", "filesystem"}, false, false}, {[]string{"x"}, false, false}, {[]string{"--sandbox", "b"}, false, false},
	} {
		wide, err := parsePolicyLs(tc.args)
		if wide != tc.wide || (err == nil) != tc.ok {
			t.Errorf("parsePolicyLs(%q) = %v, %v", tc.args, wide, err)
		}
	}
}

func TestModeAndFirstUseVerbs(t *testing.T) {
	var m mode
	if rest := globalFlags([]string{"--no-input", "ls", "--no-input"}, &m); !m.noInput || !reflect.DeepEqual(rest, []string{"ls", "--no-input"}) {
		t.Errorf("globalFlags = %q, noInput %v", rest, m.noInput)
	}
	for args, want := range map[string]bool{"version": false, "login": false, "ls": true, "exec b true": true,
		"policy set-default balanced": false, "policy init deny-all": false, "policy ls": true, "policy allow network --help": false} {
		if got := needsDaemon(strings.Fields(args)); got != want {
			t.Errorf("needsDaemon(%q) = %v, want %v", args, got, want)
		}
	}
	t.Setenv(EnvPolicyLs, "nonsense")
	if _, err := readMode(); err == nil {
		t.Error("readMode accepted an unknown policy ls table")
	}
	t.Setenv(EnvPolicyLs, "provenance")
	t.Setenv(EnvIdleStop, "1s")
	t.Setenv(EnvPolicyScope, "sandbox")
	if m, err := readMode(); err != nil || m.policyLs != "provenance" || m.idleStop != time.Second || !m.scoped || m.bootDelay != 300*time.Millisecond {
		t.Errorf("readMode = %+v, %v", m, err)
	}
	t.Setenv(EnvBootDelay, "-1s")
	if _, err := readMode(); err == nil {
		t.Error("readMode accepted a negative boot delay")
	}
}
