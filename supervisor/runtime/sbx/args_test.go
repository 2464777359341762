package sbx

import (
	"reflect"
	"strings"
	"testing"

	"deathwatch/shared"
)

func TestArgs(t *testing.T) {
	const name = "dw-ci-20261130-151001-0123abcd"
	for _, tc := range []struct {
		what string
		got  []string
		want []string
	}{
		{"version: the CLI runs", versionArgs(), []string{"version"}},
		{"ls: JSON preferred", lsArgs(true), []string{"ls", "--json"}},
		{"ls: the table", lsArgs(false), []string{"ls"}},
		{"create: name, template, memory, the shell agent, workspaces (:ro when read-only), no -e",
			createArgs(CreateConfig{Name: name, Template: "tmpl:v1", Memory: 4 << 30,
				Workspaces: []Workspace{{Path: "/home/u/w"}, {Path: "/home/u/b", ReadOnly: true}}}),
			[]string{"create", "--name", name, "--template", "tmpl:v1", "--memory", "4g", "shell", "/home/u/w", "/home/u/b:ro"}},
		{"create: no memory bound, no workspace",
			createArgs(CreateConfig{Name: name, Template: "t"}),
			[]string{"create", "--name", name, "--template", "t", "shell"}},
		{"exec: the watcher in control mode on the exec's stdin, as root in the VM, one P",
			execArgs(name, "/usr/local/bin/watcher"),
			[]string{"exec", "-i", "-u", "root", "-e", "GOMAXPROCS=1", "-e", "GODEBUG=profstackdepth=0", name, "/usr/local/bin/watcher", "--control=stdin"}},
		{"the template carries the watcher", watcherCheckArgs(name, "/usr/local/bin/watcher"),
			[]string{"exec", "-u", "root", name, "/usr/local/bin/watcher", "--version"}},
		{"rm: whatever its state", rmArgs(name), []string{"rm", "--force", name}},
		{"policy allow: scoped to the sandbox, localhost (the proxy's rewrite of host.docker.internal)",
			policyAllowArgs(name, 8080), []string{"policy", "allow", "network", "--sandbox", name, "localhost:8080"}},
		{"policy rm: the same rule, by --resource", policyRmArgs(name, 8080), []string{"policy", "rm", "network", "--sandbox", name, "--resource", "localhost:8080"}},
		{"policy help: what the scope probe reads", policyHelpArgs(), []string{"policy", "allow", "network", "--help"}},
		{"policy ls", policyLsArgs(false), []string{"policy", "ls"}},
		{"policy ls --wide: the rules of a CLI that summarises", policyLsArgs(true), []string{"policy", "ls", "--wide"}},
		{"template ls", templateLsArgs(), []string{"template", "ls"}},
		{"template load", templateLoadArgs("/tmp/t.tar"), []string{"template", "load", "/tmp/t.tar"}},
		{"docker image save", dockerImageSaveArgs("tmpl:v1", "/tmp/t.tar"), []string{"image", "save", "-o", "/tmp/t.tar", "tmpl:v1"}},
		{"nonce read: as root", NonceReadArgs(name), []string{"exec", "-u", "root", name, "cat", "/etc/deathwatch/nonce"}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s:\n got  %q\n want %q", tc.what, tc.got, tc.want)
		}
	}
}

func TestMemoryArg(t *testing.T) {
	for n, want := range map[int64]string{4 << 30: "4g", 512 << 20: "512m", 1536 << 20: "1536m", 64 << 10: "1m", 1000: "1m", 512<<20 + 1: "513m"} {
		if got := memoryArg(n); got != want {
			t.Errorf("memoryArg(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestNonceWriteArgs(t *testing.T) {
	a := NonceWriteArgs("box")
	if !reflect.DeepEqual(a[:7], []string{"exec", "-i", "-u", "root", "box", "/bin/sh", "-c"}) || len(a) != 8 {
		t.Fatalf("NonceWriteArgs = %q", a)
	}
	script := a[7]
	// The nonce comes on stdin, the file ends root-owned and read-only
	// in a root-owned folder, and the script refuses a non-root exec.
	for _, want := range []string{`[ "$(id -u)" = 0 ]`, `IFS= read -r n || [ -n "$n" ]`, `> /etc/deathwatch/.nonce.tmp`, "chmod 0444", "chown 0:0 /etc/deathwatch\n",
		"mkdir -m 0755 /etc/deathwatch", "mv -f /etc/deathwatch/.nonce.tmp /etc/deathwatch/nonce", "set -eu"} {
		if !strings.Contains(script, want) {
			t.Errorf("nonce script lacks %q:\n%s", want, script)
		}
	}
}

func TestCheckOptions(t *testing.T) {
	for _, tc := range []struct {
		network, transport string
		ports              []int
		wantErr            string
	}{
		{"", "", nil, ""},
		{"", "stdin", []int{8080, 9090}, ""},
		{"bridge", "", nil, "--network bridge cannot be honoured"},
		{"none", "", nil, "--network none cannot be honoured"},
		{"", "unix", nil, `transport "unix" cannot cross`},
		{"", "", []int{0}, "not a TCP port"},
		{"", "", []int{8080, 8080}, "given twice"},
	} {
		err := CheckOptions(tc.network, tc.transport, tc.ports)
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("CheckOptions(%q, %q, %v) = %v, want %q", tc.network, tc.transport, tc.ports, err, tc.wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("refusal is not one line: %q", err)
		}
	}
}

func TestBridge(t *testing.T) {
	ws, links, err := Bridge([]Mount{
		{Source: "/home/u/repo", Target: "/work"},
		{Source: "/home/u/bundle", Target: "/bundle", ReadOnly: true},
		{Source: "/srv/same", Target: "/srv/same"},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantWS := []Workspace{{Path: "/home/u/repo"}, {Path: "/home/u/bundle", ReadOnly: true}, {Path: "/srv/same"}}
	wantLinks := []shared.Link{{Target: "/work", Source: "/home/u/repo"}, {Target: "/bundle", Source: "/home/u/bundle"}}
	if !reflect.DeepEqual(ws, wantWS) || !reflect.DeepEqual(links, wantLinks) {
		t.Errorf("Bridge = %+v, %+v; want %+v, %+v", ws, links, wantWS, wantLinks)
	}
	for _, tc := range []struct {
		mounts  []Mount
		wantErr string
	}{
		{nil, "at least one workspace"},
		{[]Mount{{Source: "rel", Target: "/w"}}, "absolute"},
		{[]Mount{{Source: "/a/../b", Target: "/w"}}, "absolute"},
		{[]Mount{{Source: "/a:ro", Target: "/w"}}, "cannot be a workspace path"},
		{[]Mount{{Source: "/a", Target: "/w"}, {Source: "/b", Target: "/w"}}, "two mounts target"},
		{[]Mount{{Source: "/a", Target: "/w"}, {Source: "/a", Target: "/v", ReadOnly: true}}, "both read-only and read-write"},
		{[]Mount{{Source: "/a", Target: "/b"}, {Source: "/b", Target: "/c"}}, "also a workspace's own path"},
	} {
		if _, _, err := Bridge(tc.mounts); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("Bridge(%+v) = %v, want %q", tc.mounts, err, tc.wantErr)
		}
	}
}
