package kerneltests

// The watcher inside an emulated sandbox, driven the way the sbx
// runtime will drive it (sbx exec -i -u root NAME watcher
// --control=stdin, with the argv builders of supervisor/runtime/sbx
// where they are exported): not PID 1 of the sandbox, it makes its own
// PID namespace for the agent, and the end of the exec's stdin kills
// the agent tree. Also the nonce file the runtime writes at create.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor/runtime/sbx"
)

// sbxWatcherScript is a stand-in for the runtime's exec: a script that
// runs the template's watcher in the sandbox with its arguments.
func sbxWatcherScript(t *testing.T, s *ktest.Sbx, name, user string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "watcher-in-sbx")
	script := fmt.Sprintf("#!/bin/sh\nexport SBXEMU_STATE='%s'\nexec '%s' exec -i -u '%s' -e GOMAXPROCS=1 '%s' '%s' \"$@\"\n",
		s.State, filepath.Join(s.Bin, "sbx"), user, name, ktest.ImageWatcher)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSbxEmulatorNonce(t *testing.T) {
	const name = "dw-ktest-20261130-151001-0123abcd"
	s := emulatedSandbox(t, name)

	const nonce = "00112233445566778899aabbccddeeff"
	w := s.Cmd(sbx.NonceWriteArgs(name)...)
	w.Stdin = strings.NewReader(nonce)
	if out, err := w.CombinedOutput(); err != nil {
		t.Fatalf("write the nonce: %v\n%s", err, out)
	}
	out, err := s.Cmd(sbx.NonceReadArgs(name)...).Output()
	if err != nil {
		t.Fatalf("read the nonce: %v", err)
	}
	if got, err := sbx.ParseNonce(string(out)); err != nil || got != nonce {
		t.Fatalf("nonce read back = %q, %v; want %q", got, err, nonce)
	}
	if st := strings.TrimSpace(s.Run(t, "exec", "-u", "root", name, "stat", "-c", "%u:%g %a", sbx.NonceDir, sbx.NoncePath)); st != "0:0 755\n0:0 444" {
		t.Errorf("nonce folder and file: %q, want root-owned 755 and 444", st)
	}
	// The agent's uid (exec's default user) cannot change or remove it.
	for _, attack := range []string{
		"echo ffff > " + sbx.NoncePath,
		"rm -f " + sbx.NoncePath,
		"mv " + sbx.NonceDir + " /tmp/x",
		"chmod 666 " + sbx.NoncePath,
	} {
		if out, err := s.Cmd("exec", name, "sh", "-c", attack).CombinedOutput(); err == nil {
			t.Errorf("the agent uid could %q: %s", attack, out)
		}
	}
	out, _ = s.Cmd(sbx.NonceReadArgs(name)...).Output()
	if got, _ := sbx.ParseNonce(string(out)); got != nonce {
		t.Errorf("after the attacks the nonce reads %q", out)
	}
	// A non-root exec cannot write it: the script refuses.
	args := sbx.NonceWriteArgs(name)
	for i := range args {
		if args[i] == "-u" {
			args[i+1] = "1000"
		}
	}
	w = s.Cmd(args...)
	w.Stdin = strings.NewReader(nonce)
	if out, err := w.CombinedOutput(); err == nil || !strings.Contains(string(out), "did not run as root") {
		t.Errorf("a non-root nonce write: %v\n%s", err, out)
	}
	s.Run(t, "rm", "--force", name)
}

func TestSbxEmulatorWatcherKillDomain(t *testing.T) {
	const name = "dw-ktest-20261130-151002-0123abcd"
	s := emulatedSandbox(t, name)

	c := ktest.StartController(t, sbxWatcherScript(t, s, name, "root"), ktest.Options{Control: ktest.ControlStdin, Standin: true})
	marker := "dw-sbx-marker-" + fmt.Sprint(time.Now().UnixNano())
	c.Launch(shared.Spec{
		Argv: []string{"sh", "-c", "sleep 1000 & sleep 1000 & echo started; wait", marker},
		UID:  ktest.AgentUID, GID: ktest.AgentUID,
	})
	if !c.WaitStdout("started", 10*time.Second) {
		t.Fatalf("the agent did not start\n%s", c.Diagnostics())
	}
	agent := ktest.WithMarker(marker)
	if len(agent) == 0 {
		t.Fatalf("no agent process carries %s", marker)
	}
	// The agent is not in the sandbox's PID namespace: the watcher made
	// its own.
	box := containerInitPID(t, name)
	nsBox, _ := ktest.PIDNamespace(box)
	nsAgent, _ := ktest.PIDNamespace(agent[0].PID)
	if nsBox == "" || nsAgent == nsBox {
		t.Errorf("the agent shares the sandbox's PID namespace %q", nsBox)
	}
	tree := append(agent, ktest.Descendants(agent[0].PID)...)

	killed := c.KillStandin()
	took, left := ktest.WaitDead(tree, killed, ktest.Slack)
	if len(left) > 0 {
		t.Fatalf("agent processes alive %s after the controller's SIGKILL: %v\n%s", ktest.Slack, left, c.Diagnostics())
	}
	t.Logf("sbx exec -i: controller SIGKILLed -> agent tree (%d processes) dead in %s", len(tree), took.Round(time.Millisecond))
	// The sandbox itself persists until removed (documented).
	if out := s.Run(t, "ls"); !strings.Contains(out, name) {
		t.Errorf("the sandbox went without sbx rm:\n%s", out)
	}
	s.Run(t, "rm", "--force", name)
}

// An exec user without root in the VM: the watcher's PID namespace comes
// with a user namespace of its one uid, where it cannot confine the
// agent: it refuses (243) and never runs it unwatched.
func TestSbxEmulatorWatcherNotRoot(t *testing.T) {
	const name = "dw-ktest-20261130-151003-0123abcd"
	s := emulatedSandbox(t, name)

	c := ktest.StartController(t, sbxWatcherScript(t, s, name, "1000"), ktest.Options{Control: ktest.ControlStdin})
	marker := "dw-sbx-marker-" + fmt.Sprint(time.Now().UnixNano())
	if err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(shared.FrameSpec, (&shared.Spec{Argv: []string{"sh", "-c", "echo ran; sleep 1000", marker},
		UID: ktest.AgentUID, GID: ktest.AgentUID}).Marshal()); err != nil {
		t.Fatal(err)
	}
	res := c.Wait(30 * time.Second)
	if strings.Contains(c.Stdout(), "ran") || len(ktest.WithMarker(marker)) > 0 {
		t.Fatalf("the agent ran under a non-root exec user\n%s", c.Diagnostics())
	}
	t.Logf("non-root exec user: watcher exit %d, exit frame %+v\n%s", res.Code, res.Exit, c.WatcherOutput())
	if res.Code != shared.ExitRefused || res.Exit == nil || res.Exit.Code != shared.ExitRefused || !strings.Contains(res.Exit.Message, "not root in the box") {
		t.Errorf("the watcher exited %d (%+v), want a refusal (%d) that says it is not root", res.Code, res.Exit, shared.ExitRefused)
	}
	s.Run(t, "rm", "--force", name)
}

// emulatedSandbox is an emulator with the test image loaded as a
// template and one sandbox made from it, with a workspace of its own.
func emulatedSandbox(t *testing.T, name string) *ktest.Sbx {
	t.Helper()
	s := ktest.SbxEmulator(t)
	img := ktest.DockerImage(t, "docker")
	s.LoadTemplate(t, img)
	s.Run(t, "create", "shell", t.TempDir(), "--name", name, "--template", img)
	return s
}

func containerInitPID(t *testing.T, name string) int {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "--format", "{{.State.Pid}}", "sbxemu-"+name).Output()
	if err != nil {
		t.Fatalf("docker inspect: %v", err)
	}
	var pid int
	if _, err := fmt.Sscan(string(out), &pid); err != nil || pid <= 0 {
		t.Fatalf("sandbox %s has no init pid: %q", name, out)
	}
	return pid
}
