package ktest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Sbx is the sbx emulator (kernel-tests/ktest/sbxemu) installed as `sbx`
// in a folder of its own, with its own state. Env puts it first on PATH.
type Sbx struct {
	Bin   string // the folder holding `sbx`
	State string // SBXEMU_STATE
	Env   []string
}

// SbxVariants are the emulator's spellings of the CLI besides its
// default (the current reference: global rules, a summary policy ls),
// as the environment that selects each (kernel-tests/ktest/sbxemu).
var SbxVariants = map[string][]string{
	"scoped-rules":      {"SBXEMU_POLICY_SCOPE=sandbox", "SBXEMU_POLICY_LS=rules"},
	"scoped-provenance": {"SBXEMU_POLICY_SCOPE=sandbox", "SBXEMU_POLICY_LS=provenance"},
	"eof-lost":          {"SBXEMU_EXEC_EOF=lost"},
}

// SbxEmulator builds the emulator, installs it as `sbx` in a temporary
// folder, gives it a fresh state folder and does its first use (sbx
// login, sbx policy set-default deny-all). Cleanup removes every
// sandbox it still holds, its forwarders and its containers.
func SbxEmulator(t testing.TB, env ...string) *Sbx {
	t.Helper()
	s := SbxEmulatorFresh(t, env...)
	s.Run(t, "login")
	s.Run(t, "policy", "set-default", "deny-all")
	return s
}

// SbxEmulatorFresh is SbxEmulator before its first use: not signed in,
// no default network policy. env is added to the emulator's environment
// (a variant's switches).
func SbxEmulatorFresh(t testing.TB, env ...string) *Sbx {
	t.Helper()
	RequireRoot(t)
	RequireCmd(t, "docker")
	sweepStaleSbx(t)
	emu := ToolPath(t, "sbxemu")
	bin := t.TempDir()
	if err := os.Symlink(emu, filepath.Join(bin, "sbx")); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	s := &Sbx{Bin: bin, State: state}
	s.Env = append(append(withoutSbxemuEnv(os.Environ()), "SBXEMU_STATE="+state, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH")), env...)
	t.Cleanup(func() { s.cleanup(t) })
	return s
}

// withoutSbxemuEnv is env without the emulator's switches: a test says
// which spelling it runs against, never the suite's environment.
func withoutSbxemuEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "SBXEMU_") {
			out = append(out, kv)
		}
	}
	return out
}

// Cmd is `sbx args...` with the emulator's environment.
func (s *Sbx) Cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.Bin, "sbx"), args...)
	cmd.Env = s.Env
	return cmd
}

// Run runs `sbx args...` and fails the test unless it succeeds.
func (s *Sbx) Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := s.Cmd(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("sbx %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// LoadTemplate turns a Docker image into an sbx template the documented
// way: docker image save → sbx template load.
func (s *Sbx) LoadTemplate(t testing.TB, image string) {
	t.Helper()
	tar := filepath.Join(t.TempDir(), "template.tar")
	if out, err := exec.Command("docker", "image", "save", "-o", tar, image).CombinedOutput(); err != nil {
		t.Fatalf("docker image save %s: %v\n%s", image, err, out)
	}
	s.Run(t, "template", "load", tar)
}

// SbxCall is one recorded call of the emulator.
type SbxCall struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"` // names only
}

// Calls reads the emulator's record of every call so far.
func (s *Sbx) Calls(t testing.TB) []SbxCall {
	t.Helper()
	f, err := os.Open(filepath.Join(s.State, "calls.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var calls []SbxCall
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c SbxCall
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("calls.jsonl: %v", err)
		}
		calls = append(calls, c)
	}
	return calls
}

// ForwarderLog is what the forwarders logged (allow/deny decisions).
func (s *Sbx) ForwarderLog() string {
	b, _ := os.ReadFile(filepath.Join(s.State, "forwarder.log"))
	return string(b)
}

// ForwarderPID is the pid of a sandbox's forwarder, 0 when it has none.
func (s *Sbx) ForwarderPID(name string) int {
	b, err := os.ReadFile(filepath.Join(s.State, "fwd", name+".pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(string(b))
	return pid
}

// Forwarders are the live forwarder processes of this emulator's state.
func (s *Sbx) Forwarders() []Proc {
	var ps []Proc
	for _, pid := range PIDs() {
		a := Cmdline(pid)
		if len(a) >= 3 && a[1] == "__forward" && a[2] == s.State {
			ps = append(ps, Proc{PID: pid})
		}
	}
	return ps
}

func (s *Sbx) cleanup(t testing.TB) {
	cmd := s.Cmd("--no-input", "ls", "--json")
	cmd.Env = append(cmd.Env, "SBXEMU_WEDGE=0")
	out, _ := cmd.Output()
	var l struct {
		Sandboxes []struct{ Name string } `json:"sandboxes"`
	}
	_ = json.Unmarshal(out, &l)
	for _, b := range l.Sandboxes {
		if out, err := s.Cmd("rm", "--force", b.Name).CombinedOutput(); err != nil {
			t.Logf("cleanup: sbx rm --force %s: %v\n%s", b.Name, err, out)
		}
	}
	for _, p := range s.Forwarders() {
		t.Errorf("cleanup: forwarder %d outlived its sandbox; killing it", p.PID)
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	ids, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=sbxemu.state="+s.State).Output()
	for _, id := range strings.Fields(string(ids)) {
		_ = exec.Command("docker", "rm", "-f", id).Run()
	}
}

// sweepStaleSbx removes the containers of emulators whose state folder
// is gone: a test run that was killed before its cleanup. Their
// forwarders exit by themselves once the state is gone.
func sweepStaleSbx(t testing.TB) {
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=sbxemu.state", "--format", `{{.ID}} {{.Label "sbxemu.state"}}`).Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, state, ok := strings.Cut(line, " ")
		if !ok || !filepath.IsAbs(state) {
			continue
		}
		if _, err := os.Stat(state); os.IsNotExist(err) {
			t.Logf("removing container %s of a gone emulator state %s", id, state)
			_ = exec.Command("docker", "rm", "-f", id).Run()
		}
	}
}
