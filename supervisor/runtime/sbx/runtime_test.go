package sbx

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

func testBox(mounts ...supervisor.Mount) *supervisor.Box {
	return &supervisor.Box{LaunchID: "20261130-151001-0123abcd", Nonce: "00112233445566778899aabbccddeeff", Image: "tmpl:1",
		Labels: map[string]string{shared.LabelInstance: "ci"}, Network: "none", Mounts: mounts, State: map[string]string{}}
}

func TestPrepare(t *testing.T) {
	ctx := context.Background()
	f := &fakeSbx{answers: preflightAnswers()}
	r := &Runtime{run: f}

	// Named from the instance and launch id; links for differing
	// targets; ports journaled; no scratch folder when there are mounts.
	b := testBox(supervisor.Mount{Source: "/home/u/repo", Target: "/workspace"})
	b.HostPorts = []int{8080, 9090}
	if err := r.Prepare(ctx, b); err != nil {
		t.Fatal(err)
	}
	if b.Name != "dw-ci-20261130-151001-0123abcd" || b.State[statePorts] != "8080,9090" || b.State[stateScratch] != "" ||
		!reflect.DeepEqual(b.Links, []shared.Link{{Target: "/workspace", Source: "/home/u/repo"}}) {
		t.Errorf("prepared %+v", b)
	}
	// Without mounts: a scratch workspace, journaled; no ports, no preflight.
	f.calls = nil
	b = testBox()
	if err := r.Prepare(ctx, b); err != nil {
		t.Fatal(err)
	}
	if b.State[stateScratch] != scratchDir(b.Name) || len(b.Links) != 0 || len(f.calls) != 0 {
		t.Errorf("prepared %+v, calls %q", b, f.calls)
	}

	// Refusals, before any sbx call that makes anything.
	for _, tc := range []struct {
		name string
		box  func(*supervisor.Box)
		env  map[string]answer
		code int
		want string
	}{
		{"network", func(b *supervisor.Box) { b.Network, b.NetworkSet = "bridge", true }, nil, shared.ExitRefused, "--network bridge"},
		{"template", func(b *supervisor.Box) { b.Image = "" }, nil, shared.ExitUsage, "--template"},
		{"instance", func(b *supervisor.Box) { b.Labels[shared.LabelInstance] = "Upper" }, nil, shared.ExitUsage, "lower-case"},
		{"port", func(b *supervisor.Box) { b.HostPorts = []int{70000} }, nil, shared.ExitRefused, "not a TCP port"},
		{"no-scope", func(b *supervisor.Box) { b.HostPorts = []int{8080} },
			map[string]answer{"policy allow network --help": {out: "Flags:\n  -g, --global\n"}}, shared.ExitRefused, "cannot scope"},
		{"no-sbx", func(b *supervisor.Box) { b.HostPorts = []int{8080} },
			map[string]answer{"version": {err: errors.New("sbx is not installed")}}, shared.ExitEngine, "not installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ans := preflightAnswers()
			for k, v := range tc.env {
				ans[k] = v
			}
			r := &Runtime{run: &fakeSbx{answers: ans}}
			b := testBox()
			tc.box(b)
			err := r.Prepare(ctx, b)
			if err == nil || exitcode.Of(err, 0) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Prepare = %v (code %d), want code %d with %q", err, exitcode.Of(err, 0), tc.code, tc.want)
			}
		})
	}
}

func TestCheckLimits(t *testing.T) {
	r := &Runtime{}
	if err := r.CheckLimits(1<<30, 0); err != nil {
		t.Errorf("memory alone: %v", err)
	}
	if err := r.CheckLimits(0, 64); exitcode.Of(err, 0) != shared.ExitRefused {
		t.Errorf("--pids-limit: %v, want a refusal", err)
	}
}

func TestListAndNonce(t *testing.T) {
	f := &fakeSbx{answers: map[string]answer{
		"ls --json": {out: `{"sandboxes":[{"name":"dw-ci-20261130-151001-0123abcd","status":"running"},
			{"name":"dw-other-20261130-151001-0123abcd","status":"stopped"},{"name":"mine","status":"running"}]}`},
		"exec -u root dw-ci-20261130-151001-0123abcd cat " + NoncePath: {out: "00112233445566778899aabbccddeeff\n"},
	}}
	r := &Runtime{run: f}
	ls, err := r.List(context.Background(), "ci")
	want := []supervisor.Listed{{Name: "dw-ci-20261130-151001-0123abcd", Running: true, Labels: map[string]string{
		shared.LabelManaged: "true", shared.LabelInstance: "ci", shared.LabelLaunchID: "20261130-151001-0123abcd"}}}
	if err != nil || !reflect.DeepEqual(ls, want) {
		t.Errorf("List = %+v, %v", ls, err)
	}
	if ok, err := r.Exists(context.Background(), &supervisor.Box{Name: "mine"}); !ok || err != nil {
		t.Errorf("Exists(mine) = %v, %v", ok, err)
	}
	if n, err := r.ReadNonce(context.Background(), &supervisor.Box{Name: ls[0].Name}); err != nil || n != "00112233445566778899aabbccddeeff" {
		t.Errorf("ReadNonce = %q, %v", n, err)
	}
}

func TestRemoveRulesUnion(t *testing.T) {
	const name = "dw-ci-20261130-151001-0123abcd"
	f := &fakeSbx{answers: map[string]answer{
		"policy ls": {out: "NAME   TYPE   ORIGIN   DECISION   STATUS   RESOURCES\nrule-1   network   sandbox:" + name + "   allow   active   localhost:9090\n"},
		"ls --json": {out: `{"sandboxes":[]}`},
	}}
	r := &Runtime{run: f}
	b := &supervisor.Box{Name: name, State: map[string]string{statePorts: "8080"}}
	r.Remove(context.Background(), b)
	var rms []string
	for _, c := range f.calls {
		if len(c) > 1 && c[0] == "policy" && c[1] == "rm" {
			rms = append(rms, c[len(c)-1])
		}
	}
	if !reflect.DeepEqual(rms, []string{"localhost:8080", "localhost:9090"}) {
		t.Errorf("rules removed %v, want the journaled and the listed one", rms)
	}
}

func TestWithUser(t *testing.T) {
	got := withUser(execArgs("n", "/w"), "1000")
	if strings.Join(got, " ") != "exec -i -u 1000 -e GOMAXPROCS=1 -e GODEBUG=profstackdepth=0 n /w --control=stdin" {
		t.Errorf("withUser = %q", got)
	}
	if got := splitPorts("80, x,0,65536,443"); !reflect.DeepEqual(got, []int{80, 443}) {
		t.Errorf("splitPorts = %v", got)
	}
}

func TestCountProcesses(t *testing.T) {
	const name = "dw-ci-20261130-151001-0123abcd"
	args := CountArgs(name, "M=1")
	if want := []string{"exec", "-u", "root", name, "/bin/sh", "-c", countScript, "sh", "M=1"}; !reflect.DeepEqual(args, want) {
		t.Errorf("CountArgs = %q", args)
	}
	f := &fakeSbx{answers: map[string]answer{strings.Join(args, " "): {out: "3\n"}}}
	if n, err := (&Runtime{run: f}).CountProcesses(context.Background(), &supervisor.Box{Name: name}, "M=1"); n != 3 || err != nil {
		t.Errorf("CountProcesses = %d, %v", n, err)
	}
	for _, bad := range []string{"", "x", "-1"} {
		if _, err := ParseCount(bad); err == nil {
			t.Errorf("ParseCount(%q) = nil error", bad)
		}
	}
}

func TestRegistered(t *testing.T) {
	d, ok := supervisor.Lookup(Name)
	if !ok || d.AutoRank != 0 || d.Has(supervisor.CapAutoRemove) || d.Daemon || d.ImageWatcher != DefaultWatcherPath || !d.Has(supervisor.CapHostPorts) || !d.Has(supervisor.CapNoHostProcesses) {
		t.Errorf("descriptor %+v", d)
	}
	if err := d.Installed([]string{"PATH=/nonexistent"}); err == nil {
		t.Errorf("Installed with no sbx on PATH = nil")
	}
}

// Probe learns the dialect once; Prepare refuses host ports on a CLI
// whose rules are global without another call; a create that failed for
// a missing template exits 242 (image), another failure 244.
func TestProbeDialectAndCreateCodes(t *testing.T) {
	ctx := context.Background()
	ans := preflightAnswers()
	ans["policy allow network --help"] = answer{out: "Usage:\n  sbx policy allow network RESOURCES\n"}
	f := &fakeSbx{answers: ans}
	r := &Runtime{run: f}
	info, err := r.Probe(ctx)
	if err != nil || !info.Present || !strings.Contains(info.Detail, "--host-port refused") {
		t.Fatalf("Probe = %+v, %v", info, err)
	}
	n := len(f.calls)
	b := testBox()
	b.HostPorts = []int{8080}
	if err := r.Prepare(ctx, b); exitcode.Of(err, 0) != shared.ExitRefused || !strings.Contains(err.Error(), "cannot scope") {
		t.Errorf("Prepare with a port on a global-only CLI = %v", err)
	}
	if len(f.calls) != n {
		t.Errorf("Prepare called sbx again: %q", f.calls[n:])
	}

	// Not signed in: Probe is an engine error that says what to run.
	ans = preflightAnswers()
	ans["ls --json"] = answer{err: errors.New("sbx ls: exit status 1: not signed in")}
	ans["ls"] = ans["ls --json"]
	if _, err := (&Runtime{run: &fakeSbx{answers: ans}}).Probe(ctx); exitcode.Of(err, 0) != shared.ExitEngine || !strings.Contains(err.Error(), "sbx login") {
		t.Errorf("Probe not signed in = %v", err)
	}

	for _, tc := range []struct {
		list string
		code int
	}{{"TEMPLATE\nother:1\n", shared.ExitImage}, {"TEMPLATE\ntmpl:1\n", shared.ExitSetupFailed}} {
		f := &fakeSbx{answers: map[string]answer{"create*": {err: errors.New("create failed")}, "template ls": {out: tc.list}}}
		w := t.TempDir() // Create opens the source (supervisor.CheckMountSources)
		b := testBox(supervisor.Mount{Source: w, Target: w})
		b.Name = "dw-ci-20261130-151001-0123abcd"
		if err := (&Runtime{run: f}).Create(ctx, b); exitcode.Of(err, 0) != tc.code {
			t.Errorf("Create with templates %q = %v (code %d), want %d", tc.list, err, exitcode.Of(err, 0), tc.code)
		}
	}
}
