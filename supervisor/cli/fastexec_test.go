package cli

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestFastExecIsKong: fastExec knows exec's flags as kong's model
// of execCLI spells them (names, short names, variables, defaults,
// enums), and what it parses kong parses into the same execCLI; what
// it leaves to kong includes every line kong refuses.
func TestFastExecIsKong(t *testing.T) {
	fs := fastFlags()
	if fs == nil {
		t.Fatal("fastFlags: execCLI has a field fastExec cannot read: every exec goes to kong")
	}
	p, err := newParser(&execCLI{}, &cmdContext{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	check := func(global bool, name string, short rune, envs []string, def, enum string) {
		k := fs.lookup(name, true)
		if k < 0 {
			t.Errorf("kong's flag --%s: fastExec does not know it", name)
			return
		}
		seen++
		f := fs.flags[k]
		if f.global != global || f.short != short || !slices.Equal(envs, nonEmpty(f.env)) || f.def != def || strings.Join(f.enum, ",") != enum {
			t.Errorf("--%s: fastExec has global %v short %q env %q default %q enum %q; kong global %v short %q env %q default %q enum %q",
				name, f.global, f.short, f.env, f.def, f.enum, global, short, envs, def, enum)
		}
	}
	for _, f := range p.Model.Flags {
		if f.Name != "help" {
			check(true, f.Name, f.Short, f.Envs, f.Default, f.Enum)
		}
	}
	exec := p.Model.Children[0]
	for _, f := range exec.Flags {
		check(false, f.Name, f.Short, f.Envs, f.Default, f.Enum)
	}
	if seen != len(fs.flags) {
		t.Errorf("fastExec knows %d flags, kong %d", len(fs.flags), seen)
	}

	w := "/x/watcher"
	type line struct {
		args []string
		env  map[string]string
		fast bool // fastExec parses it (else kong)
	}
	var lines []line
	for _, args := range [][]string{
		{"exec", "--", "true"},
		{"exec", "--runtime", "native", "--", "/bin/true"},
		{"exec", "--runtime=native", "--watcher", w, "--", "/bin/true", "-h", "--help"},
		{"--instance", "ci", "--journal", "/j", "--log-level", "debug", "--kube-context", "kc", "--kube-namespace", "kn", "exec", "--runtime", "podman", "--image", "img",
			"--name", "job", "--label", "team=a,b", "--label", "x=y", "--run-key", "run-1", "--env", "TOKEN", "--workdir", "/work",
			"--mount", "/src:/data:ro", "--memory", "512m", "--pids-limit", "64", "--network", "bridge",
			"--deadline", "1m", "--grace", "3s", "--heartbeat", "3s", "--watcher", w, "--user", "1001:1002",
			"--host-port", "80", "--host-port", "0x51", "--copy-in", "/a:/b", "--copy-out", "/c:/d", "--copy-out-limit", "2g",
			"--copy-out-max-entries", "7", "--stage", "auto", "--allow-rootful", "--allow-userns", "-it",
			"--kube-node-selector", "a=b", "--kube-toleration", "t:NoSchedule", "--kube-runtime-class", "gvisor", "--kube-pull-never", "--kube-cpu-limit", "2",
			"--", "sh", "-c", "echo --help -h"},
		{"exec", "--template", "t", "--allow-host-network", "--events", "fd:3", "--watcher-in-image", "/w", "--controller-fd", "3", "--", "true"},
		{"exec", "-t", "-i", "--detach", "--instance", "late", "--", "x"},
		{"exec", "--deadline", "0", "--heartbeat", "0s", "--pids-limit", "010", "--", "x"},
	} {
		lines = append(lines, line{args: args, fast: true})
	}
	for _, args := range [][]string{
		{"exec", "--no-such-flag", "--", "true"},
		{"exec", "--runtime", "nosuch", "--", "true"},
		{"exec", "--stage", "nosuch", "--", "true"},
		{"exec", "--deadline", "soon", "--", "true"},
		{"exec", "--pids-limit", "many", "--", "true"},
		{"exec", "--memory"},
		{"exec", "--memory", "--", "x"},
		{"exec"},
		{"exec", "--"},
		{"exec", "true"},
		{"exec", "--tty=true", "--", "x"},
		{"exec", "-x", "--", "x"},
		{"exec", "-tt", "--", "x"},
		{"exec", "--image", "a", "--image", "b", "--", "x"},
		{"exec", "--controller-fd", "-1", "--", "x"},
		{"--runtime", "native", "exec", "--", "x"},
		{"--", "exec", "x"},
		{"ls", "exec", "--", "x"},
	} {
		lines = append(lines, line{args: args})
	}
	for _, env := range []map[string]string{
		{"DEATHWATCH_RUNTIME": "native", "DEATHWATCH_IMAGE": "img", "DEATHWATCH_INSTANCE": "envi", "DEATHWATCH_JOURNAL": "/jj", "DEATHWATCH_K8S_CONTEXT": "c"},
	} {
		lines = append(lines, line{args: []string{"exec", "--", "x"}, env: env, fast: true},
			line{args: []string{"--instance", "flag", "exec", "--runtime", "docker", "--", "x"}, env: env, fast: true})
	}
	for _, env := range []map[string]string{
		{"DEATHWATCH_RUNTIME": "nosuch"},
		{"DEATHWATCH_RUNTIME": ""},
		{"DEATHWATCH_K8S_PULL_NEVER": "true"},
		{"DEATHWATCH_K8S_NODE_SELECTOR": "a=b"},
	} {
		lines = append(lines, line{args: []string{"exec", "--", "x"}, env: env})
	}
	for _, l := range lines {
		for _, k := range []string{"DEATHWATCH_RUNTIME", "DEATHWATCH_IMAGE", "DEATHWATCH_INSTANCE", "DEATHWATCH_JOURNAL", "DEATHWATCH_K8S_CONTEXT", "DEATHWATCH_K8S_PULL_NEVER", "DEATHWATCH_K8S_NODE_SELECTOR"} {
			if v, ok := l.env[k]; ok {
				t.Setenv(k, v)
			} else {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
		}
		fast, ok := fastExec(l.args, os.LookupEnv)
		if ok != l.fast {
			t.Errorf("%q %v: fastExec ok %v, want %v", l.args, l.env, ok, l.fast)
		}
		var out, errb bytes.Buffer
		lean := newLeanExec()
		lp, err := newParser(lean.Interface(), &cmdContext{stdout: &out, stderr: &errb})
		if err != nil {
			t.Fatal(err)
		}
		_, kerr := lp.Parse(l.args)
		if !ok {
			continue
		}
		if kerr != nil {
			t.Errorf("%q %v: fastExec parsed it, kong refuses it: %v", l.args, l.env, kerr)
			continue
		}
		if k := leanExec(lean); !reflect.DeepEqual(fast, k) {
			t.Errorf("%q %v: fastExec made\n%+v\nkong\n%+v", l.args, l.env, fast, k)
		}
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
