package kerneltests

// The sbx emulator (kernel-tests/ktest/sbxemu) driven directly, before
// the sbx runtime is tested on it: that it keeps the documented surface
// and is strict where the documentation is silent, and that its network
// policy lets a sandbox reach the host's port only while a rule exists.

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// hostGreeter listens on the host's 127.0.0.1 and greets every
// connection; it returns the port.
func hostGreeter(t *testing.T, greeting string) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(greeting + "\n"))
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// TestSbxEmulator drives the spelling with rules of one sandbox
// (--sandbox) and the older rule table, whose forwarder behaviour the
// default spelling shares.
func TestSbxEmulator(t *testing.T) {
	s := ktest.SbxEmulator(t, ktest.SbxVariants["scoped-rules"]...)
	img := ktest.DockerImage(t, "docker")
	s.LoadTemplate(t, img)

	if out := s.Run(t, "version"); !strings.Contains(out, "sbx version") {
		t.Fatalf("sbx version: %q", out)
	}
	ws := t.TempDir()
	ro := t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "brief.md"), []byte("brief\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}

	// Refusals before anything exists.
	for _, bad := range [][]string{
		{"create", "shell", ws, "--name", "emu-x", "--template", "not-loaded:1"},
		{"create", "shell", ro + ":/bundle", "--name", "emu-x", "--template", img},
		{"rm", "--force", "emu-nosuch"},
		{"exec", "emu-nosuch", "true"},
		{"policy", "allow", "network", "--sandbox", "emu-nosuch", "localhost:1"},
	} {
		if out, err := s.Cmd(bad...).CombinedOutput(); err == nil {
			t.Errorf("sbx %s succeeded:\n%s", strings.Join(bad, " "), out)
		}
	}

	s.Run(t, "create", "shell", ws, ro+":ro", "--name", "emu-a", "--template", img, "--memory", "256m", "-e", "CREATE_TIME_VAR=visible")
	if out := s.Run(t, "ls"); !strings.Contains(out, "emu-a") || !strings.Contains(out, "stopped") {
		t.Errorf("after create, sbx ls does not show emu-a stopped:\n%s", out)
	}
	// exec starts the sandbox; its default user is not root; its PID 1
	// is the sandbox's own init.
	if out := strings.TrimSpace(s.Run(t, "exec", "emu-a", "id", "-u")); out != "1000" {
		t.Errorf("exec's default user: id -u = %q, want 1000", out)
	}
	if out := strings.TrimSpace(s.Run(t, "exec", "-u", "root", "emu-a", "id", "-u")); out != "0" {
		t.Errorf("exec -u root: id -u = %q, want 0", out)
	}
	if out := s.Run(t, "exec", "emu-a", "cat", "/proc/1/cmdline"); !strings.HasPrefix(out, "/.sbxemu/init") {
		t.Errorf("PID 1 of the sandbox is %q, not its own init", out)
	}
	if out := s.Run(t, "ls", "--json"); !strings.Contains(out, `"running"`) {
		t.Errorf("after exec, sbx ls --json does not say running:\n%s", out)
	}
	// Workspaces at their own path; :ro is read-only.
	if out := s.Run(t, "exec", "emu-a", "cat", filepath.Join(ro, "brief.md")); out != "brief\n" {
		t.Errorf("read-only workspace: %q", out)
	}
	if out, err := s.Cmd("exec", "-u", "root", "emu-a", "touch", filepath.Join(ro, "x")).CombinedOutput(); err == nil {
		t.Errorf("wrote into a :ro workspace: %s", out)
	}
	s.Run(t, "exec", "emu-a", "touch", filepath.Join(ws, "made-inside"))
	if _, err := os.Stat(filepath.Join(ws, "made-inside")); err != nil {
		t.Errorf("a file made in the workspace is not on the host: %v", err)
	}
	// Create-time variables are not visible to exec; -e NAME passes the
	// caller's value without putting it in an argv.
	if out := s.Run(t, "exec", "emu-a", "sh", "-c", "echo \"[$CREATE_TIME_VAR]\""); out != "[]\n" {
		t.Errorf("a create-time variable reached exec: %q", out)
	}
	cmd := s.Cmd("exec", "-e", "EXEC_VAR", "emu-a", "sh", "-c", "echo \"[$EXEC_VAR]\"")
	cmd.Env = append(cmd.Env, "EXEC_VAR=from-env")
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "[from-env]\n" {
		t.Errorf("exec -e NAME: %q, %v", out, err)
	}

	// The network: nothing leaves but through the forwarder, and the
	// forwarder passes only while a matching rule exists.
	port := hostGreeter(t, "hello-from-host")
	p := strconv.Itoa(port)
	reach := func(sandbox string) bool {
		out, _ := s.Cmd("exec", sandbox, "nc", "-w", "3", "host.docker.internal", p).CombinedOutput()
		return strings.Contains(string(out), "hello-from-host")
	}
	if reach("emu-a") {
		t.Fatal("reached the host's port without a rule")
	}
	if out, err := s.Cmd("exec", "emu-a", "nc", "-w", "2", "192.0.2.1", "80").CombinedOutput(); err == nil {
		t.Errorf("the sandbox has a route out besides the forwarder: %s", out)
	}
	s.Run(t, "create", "shell", ws, "--name", "emu-b", "--template", img)
	s.Run(t, "exec", "emu-b", "true")
	s.Run(t, "policy", "allow", "network", "--sandbox", "emu-b", "localhost:"+p)
	s.Run(t, "policy", "allow", "network", "--sandbox", "emu-a", "host.docker.internal:"+p)
	if reach("emu-a") {
		t.Error("a rule scoped to another sandbox, or naming host.docker.internal, let emu-a through")
	}
	if !reach("emu-b") {
		t.Errorf("emu-b's own rule does not let it through; forwarder log:\n%s", s.ForwarderLog())
	}
	s.Run(t, "policy", "allow", "network", "--sandbox", "emu-a", "localhost:"+p)
	if !reach("emu-a") {
		t.Errorf("emu-a's rule does not let it through; forwarder log:\n%s", s.ForwarderLog())
	}
	if out := s.Run(t, "policy", "ls"); !strings.Contains(out, "sandbox:emu-a") {
		t.Errorf("policy ls does not show the scoped rule:\n%s", out)
	}
	s.Run(t, "policy", "rm", "network", "--sandbox", "emu-a", "--resource", "localhost:"+p)
	if reach("emu-a") {
		t.Error("reached the host's port after the rule was removed (the rule must be checked at connect time)")
	}
	if !strings.Contains(s.ForwarderLog(), "deny host.docker.internal:"+p) {
		t.Errorf("the forwarder did not log the denial:\n%s", s.ForwarderLog())
	}

	// stop ends the forwarder; exec starts both again.
	fwd := s.ForwarderPID("emu-a")
	s.Run(t, "stop", "emu-a")
	if fwd == 0 || ktest.Alive(ktest.Proc{PID: fwd}) {
		t.Errorf("forwarder %d of a stopped sandbox is alive", fwd)
	}
	s.Run(t, "exec", "emu-a", "true")
	if s.ForwarderPID("emu-a") == 0 {
		t.Error("exec of a stopped sandbox did not start its forwarder")
	}

	// rm: without --force it would prompt; the forwarder dies with the
	// sandbox; a scoped rule outlives it (strict: the docs do not say).
	if out, err := s.Cmd("rm", "emu-a").CombinedOutput(); err == nil {
		t.Errorf("rm without --force succeeded: %s", out)
	}
	fwd = s.ForwarderPID("emu-a")
	s.Run(t, "rm", "--force", "emu-a", "emu-b")
	if _, left := ktest.WaitDead([]ktest.Proc{{PID: fwd}}, time.Now(), ktest.Slack); len(left) > 0 {
		t.Errorf("forwarder %d outlived sbx rm", fwd)
	}
	if ps := s.Forwarders(); len(ps) > 0 {
		t.Errorf("forwarders left after rm: %v", ps)
	}
	if out := s.Run(t, "ls"); strings.Contains(out, "emu-") {
		t.Errorf("sbx ls after rm:\n%s", out)
	}
	if out := s.Run(t, "policy", "ls"); !strings.Contains(out, "sandbox:emu-b") {
		t.Errorf("emu-b's rule went with the sandbox (the emulator keeps it):\n%s", out)
	}
	s.Run(t, "policy", "rm", "network", "--sandbox", "emu-b", "--resource", "localhost:"+p)
	if out, err := s.Cmd("policy", "rm", "network", "--sandbox", "emu-b", "--resource", "localhost:"+p).CombinedOutput(); err == nil {
		t.Errorf("policy rm of a rule that is gone succeeded: %s", out)
	}

	// Every call is recorded, the environment by name only.
	calls := s.Calls(t)
	if len(calls) < 20 {
		t.Errorf("only %d calls recorded", len(calls))
	}
	for _, c := range calls {
		for _, n := range c.Env {
			if strings.Contains(n, "=") {
				t.Fatalf("a recorded environment entry holds a value: %q", n)
			}
		}
	}

	// The default CLI, without sandbox scope: its help does not offer it
	// and the flag is refused.
	cmd = s.Cmd("policy", "allow", "network", "--help")
	cmd.Env = append(cmd.Env, "SBXEMU_POLICY_SCOPE=")
	if out, err := cmd.Output(); err != nil || strings.Contains(string(out), "--sandbox") {
		t.Errorf("unscoped help: %v\n%s", err, out)
	}
	if out := s.Run(t, "policy", "allow", "network", "--help"); !strings.Contains(out, "--sandbox") {
		t.Errorf("scoped help does not offer --sandbox:\n%s", out)
	}
}

// TestSbxEmulatorCurrent: the default spelling, as the current
// reference documents it: first use (sign-in, then the default network
// policy, the prompt and --no-input), rules for every sandbox and a
// summary listing (the rules with --wide), auto-stop after idle and
// exec booting a stopped sandbox, and a wedged daemon.
func TestSbxEmulatorCurrent(t *testing.T) {
	s := ktest.SbxEmulatorFresh(t, "SBXEMU_IDLE_STOP=1s", "SBXEMU_BOOT_DELAY=200ms")
	img := ktest.DockerImage(t, "docker")

	// First use, one step at a time.
	fails := func(want string, stdin string, args ...string) {
		t.Helper()
		cmd := s.Cmd(args...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("sbx %s: %v, want a failure saying %q:\n%s", strings.Join(args, " "), err, want, out)
		}
	}
	fails("not signed in: run sbx login", "", "ls")
	s.Run(t, "login")
	fails("run sbx policy set-default balanced", "", "ls")
	fails("run sbx policy set-default balanced", "2\n", "--no-input", "ls")
	cmd := s.Cmd("ls")
	cmd.Stdin = strings.NewReader("3\n") // the prompt's answer: Locked Down
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "Choose a default network policy") {
		t.Fatalf("the first-start prompt: %v\n%s", err, out)
	}
	fails("already initialized", "", "policy", "init", "balanced")
	s.Run(t, "policy", "set-default", "balanced")
	s.LoadTemplate(t, img)

	// Rules for every sandbox: no --sandbox; the listing is a summary,
	// --wide shows the rules, the preset's continued on further rows.
	ws := t.TempDir()
	s.Run(t, "create", "shell", ws, "--name", "emu-c", "--template", img)
	fails("unknown flag: --sandbox", "", "policy", "allow", "network", "--sandbox", "emu-c", "localhost:1")
	port := hostGreeter(t, "hello-global")
	p := strconv.Itoa(port)
	s.Run(t, "policy", "allow", "network", "localhost:"+p)
	if out := s.Run(t, "policy", "ls"); !strings.HasPrefix(out, "POLICY") || !strings.Contains(out, "SUMMARY") || strings.Contains(out, "localhost:") {
		t.Errorf("policy ls is not the summary:\n%s", out)
	}
	if out := s.Run(t, "policy", "ls", "--wide"); !strings.Contains(out, "localhost:"+p) || !strings.Contains(out, "api.openai.com") {
		t.Errorf("policy ls --wide lacks the rules:\n%s", out)
	}
	if out, _ := s.Cmd("exec", "emu-c", "nc", "-w", "3", "host.docker.internal", p).CombinedOutput(); !strings.Contains(string(out), "hello-global") {
		t.Errorf("a global rule does not let the sandbox through: %s\n%s", out, s.ForwarderLog())
	}
	s.Run(t, "policy", "rm", "network", "--resource", "localhost:"+p)

	// Auto-stop: no session for the idle time stops it; exec boots it.
	status := func() string {
		var l struct {
			Sandboxes []struct{ Name, Status string }
		}
		_ = json.Unmarshal([]byte(s.Run(t, "ls", "--json")), &l)
		for _, b := range l.Sandboxes {
			if b.Name == "emu-c" {
				return b.Status
			}
		}
		return "absent"
	}
	if !ktest.WaitFor(30*time.Second, func() bool { return status() == "stopped" }) {
		t.Errorf("an idle sandbox did not stop by itself: %s\n%s", status(), s.ForwarderLog())
	}
	t0 := time.Now()
	if out := strings.TrimSpace(s.Run(t, "exec", "emu-c", "echo", "booted")); out != "booted" {
		t.Errorf("exec of a stopped sandbox: %q", out)
	}
	if took := time.Since(t0); took < 200*time.Millisecond {
		t.Errorf("exec of a stopped sandbox took %v, less than its boot delay", took)
	}
	// A long session keeps it running past the idle time.
	long := s.Cmd("exec", "emu-c", "sleep", "3")
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if st := status(); st != "running" {
		t.Errorf("a sandbox with a live session is %s", st)
	}
	long.Wait()
	s.Run(t, "rm", "--force", "emu-c")

	// A wedged daemon answers nothing.
	cmd = s.Cmd("ls")
	cmd.Env = append(cmd.Env, "SBXEMU_WEDGE=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Errorf("a wedged sbx ls returned: %v", err)
	case <-time.After(time.Second):
		cmd.Process.Kill()
		<-done
	}
}
