package kerneltests

// supervisor/runtime/sbx's Driver against the sbx emulator: the calls
// the runtime will make, in the order it will make them, with the
// watcher started the way its Start will (sbx exec -i -u root).

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor/runtime/sbx"
	"deathwatch/supervisor/supervisortest"
)

func TestSbxDriverOnEmulator(t *testing.T) {
	s := ktest.SbxEmulator(t, ktest.SbxVariants["scoped-provenance"]...)
	img := ktest.DockerImage(t, "docker")
	s.LoadTemplate(t, img)
	ctx := context.Background()
	d := &sbx.Driver{Run: sbx.CLI{Bin: filepath.Join(s.Bin, "sbx"), Env: s.Env}, Watcher: ktest.ImageWatcher}

	if dl, err := d.Preflight(ctx, true); err != nil || !strings.Contains(dl.Version, "sbx version") || !dl.Scoped || dl.Wide {
		t.Fatalf("Preflight = %+v, %v", dl, err)
	}
	noScope := &sbx.Driver{Run: sbx.CLI{Bin: filepath.Join(s.Bin, "sbx"), Env: append(s.Env[:len(s.Env):len(s.Env)], "SBXEMU_POLICY_SCOPE=", "SBXEMU_POLICY_LS=")}}
	if _, err := noScope.Preflight(ctx, true); !errors.Is(err, sbx.ErrNoScope) {
		t.Errorf("Preflight of a CLI without rule scope = %v, want the refusal", err)
	}

	name, err := sbx.SandboxName("ktest", supervisortest.NewLaunchID())
	if err != nil {
		t.Fatal(err)
	}
	other, err := sbx.SandboxName("other", supervisortest.NewLaunchID())
	if err != nil {
		t.Fatal(err)
	}
	ws, bundle := t.TempDir(), t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "brief.md"), []byte("the brief\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	workspaces, links, err := sbx.Bridge([]sbx.Mount{{Source: ws, Target: "/workspace"}, {Source: bundle, Target: "/bundle", ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	port := hostGreeter(t, "hello-controller")
	const nonce = "0123456789abcdef0123456789abcdef"
	const secret = "s3cr3t-value-that-must-not-leak"

	if err := d.Create(ctx, sbx.CreateConfig{Name: name, Template: img, Memory: 256 << 20, Workspaces: workspaces}, nonce, []int{port}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	otherWS := t.TempDir()
	if err := d.Create(ctx, sbx.CreateConfig{Name: other, Template: img, Workspaces: []sbx.Workspace{{Path: otherWS}}}, nonce, nil); err != nil {
		t.Fatalf("Create (other instance): %v", err)
	}
	if got, err := d.ReadNonce(ctx, name); err != nil || got != nonce {
		t.Fatalf("ReadNonce = %q, %v", got, err)
	}

	// The agent: the bridge links, the controller's port through the
	// rule, the secret from the spec only.
	c := ktest.StartController(t, sbxWatcherScript(t, s, name, "root"), ktest.Options{Control: ktest.ControlStdin})
	if err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	spec := shared.Spec{
		Argv: []string{"sh", "-c", `cat /bundle/brief.md; nc -w 3 host.docker.internal ` + strconv.Itoa(port) +
			`; touch /workspace/made-by-agent; [ "$TURN_SECRET" = ` + secret + ` ] && echo secret-arrived; id -u`},
		Env: []string{"TURN_SECRET=" + secret},
		UID: ktest.AgentUID, GID: ktest.AgentUID, Links: links,
	}
	if err := c.Send(shared.FrameSpec, spec.Marshal()); err != nil {
		t.Fatal(err)
	}
	res := c.Wait(60 * time.Second)
	out := c.Stdout()
	for _, want := range []string{"the brief", "hello-controller", "secret-arrived", strconv.Itoa(ktest.AgentUID)} {
		if !strings.Contains(out, want) {
			t.Errorf("agent output lacks %q:\n%s\n%s", want, out, c.Diagnostics())
		}
	}
	if res.Exit == nil || res.Exit.Reason != shared.ReasonExited || res.Exit.Code != 0 {
		t.Errorf("exit = %+v (code %d)\n%s", res.Exit, res.Code, c.Diagnostics())
	}
	if _, err := os.Stat(filepath.Join(ws, "made-by-agent")); err != nil {
		t.Errorf("the agent's file did not reach the host workspace: %v", err)
	}

	// Reconcile's view: ours is listed and proven by name and nonce; the
	// other instance's is not ours to touch.
	list, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]sbx.Verdict{}
	for _, b := range list {
		v, _ := sbx.Decide(sbx.Claim{Name: b.Name, Instance: "ktest", Journaled: b.Name == name,
			LaunchID: strings.TrimPrefix(name, sbx.NamePrefix+"ktest-"), Nonce: nonce, NonceRead: nonce, OwnerGone: true})
		seen[b.Name] = v
	}
	if seen[name] != sbx.Remove || seen[other] != sbx.Ignore {
		t.Errorf("verdicts = %v", seen)
	}
	if ports, err := d.ScopedPorts(ctx, name); err != nil || len(ports) != 1 || ports[0] != port {
		t.Errorf("ScopedPorts = %v, %v", ports, err)
	}

	// Remove: the rule and the sandbox, proven gone; a second Remove is
	// a no-op; the other instance's sandbox is untouched.
	if err := d.Remove(ctx, name, []int{port}); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := d.Remove(ctx, name, []int{port}); err != nil {
		t.Errorf("a second Remove: %v", err)
	}
	if out := s.Run(t, "policy", "ls", "--wide"); strings.Contains(out, "sandbox:"+name) {
		t.Errorf("the rule outlived Remove:\n%s", out)
	}
	list, _ = d.List(ctx)
	if len(list) != 1 || list[0].Name != other {
		t.Errorf("after Remove: %+v, want only %s", list, other)
	}
	if err := d.Remove(ctx, other, nil); err != nil {
		t.Errorf("Remove (other): %v", err)
	}
	if ps := s.Forwarders(); len(ps) > 0 {
		t.Errorf("forwarders left: %v", ps)
	}

	// The secret never left the spec frame: no argv, no recorded call,
	// no forwarder log.
	for _, f := range []string{"calls.jsonl", "forwarder.log"} {
		b, _ := os.ReadFile(filepath.Join(s.State, f))
		if strings.Contains(string(b), secret) {
			t.Errorf("the secret is in the emulator's %s", f)
		}
	}
	for _, call := range s.Calls(t) {
		if strings.Contains(strings.Join(call.Argv, " "), nonce) {
			t.Errorf("the nonce is in an argv: %q", call.Argv)
		}
	}
}
