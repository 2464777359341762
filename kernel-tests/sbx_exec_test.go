package kerneltests

// `supervisor exec --runtime sbx` end to end on the sbx emulator: the
// built supervisor drives the emulator's `sbx` through the registered
// runtime (supervisor/runtime/sbx), the template's watcher runs under
// `sbx exec -i -u root`, and ls, reconcile and prove-deathwatch go
// through the registry.

import (
	"bytes"
	"context"
	"deathwatch/supervisor/journal"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor/cli"
	"deathwatch/supervisor/runtime/sbx"
	"deathwatch/supervisor/supervisortest"
)

// sbxRig is the built supervisor on one emulator, with an instance and
// a journal of its own.
type sbxRig struct {
	t        *testing.T
	s        *ktest.Sbx
	bin      ktest.Binaries
	template string
	instance string
	journal  string
}

// newSbxRig is the rig on an emulator of the current CLI with env (a
// variant's switches) added.
func newSbxRig(t *testing.T, env ...string) *sbxRig {
	s := ktest.SbxEmulator(t, env...)
	img := ktest.DockerImage(t, "docker")
	s.LoadTemplate(t, img)
	return &sbxRig{t: t, s: s, bin: ktest.Build(t), template: img,
		instance: fmt.Sprintf("kt%d-%d", os.Getpid()%100000, time.Now().UnixNano()%1e6),
		journal:  filepath.Join(t.TempDir(), "journal")}
}

// supervisor is `supervisor --instance I --journal J args...` with the
// emulator first on PATH and env added.
func (r *sbxRig) supervisor(env []string, args ...string) *exec.Cmd {
	c := exec.Command(r.bin.Supervisor, append([]string{"--instance", r.instance, "--journal", r.journal}, args...)...)
	c.Env = append(append([]string(nil), r.s.Env...), env...)
	return c
}

// exec is `supervisor exec --runtime sbx --template T extra...`.
func (r *sbxRig) exec(env []string, extra ...string) *exec.Cmd {
	return r.supervisor(env, append([]string{"exec", "--runtime", "sbx", "--template", r.template}, extra...)...)
}

// sandboxes are the names `sbx ls` shows that belong to instance.
func (r *sbxRig) sandboxes(instance string) []string {
	var out []string
	for _, n := range strings.Fields(r.s.Run(r.t, "ls", "-q")) {
		if inst, _, ok := sbx.ParseSandboxName(n); ok && inst == instance {
			out = append(out, n)
		}
	}
	return out
}

// rules are the `sbx policy ls --wide` rows scoped to a sandbox of
// the instance (--wide: every spelling takes it, the current one needs it).
func (r *sbxRig) rules() []string {
	var out []string
	for _, l := range strings.Split(r.s.Run(r.t, "policy", "ls", "--wide"), "\n") {
		if strings.Contains(l, "sandbox:"+sbx.NamePrefix+r.instance+"-") {
			out = append(out, l)
		}
	}
	return out
}

// assertClean: no sandbox, rule or scratch folder of the instance left,
// every journal entry closed.
func (r *sbxRig) assertClean(what string) {
	r.t.Helper()
	if b := r.sandboxes(r.instance); len(b) > 0 {
		r.t.Errorf("%s: sandboxes left: %v", what, b)
	}
	if rs := r.rules(); len(rs) > 0 {
		r.t.Errorf("%s: rules left: %v", what, rs)
	}
	if m, _ := filepath.Glob(filepath.Join(os.TempDir(), "deathwatch-sbx-"+sbx.NamePrefix+r.instance+"-*")); len(m) > 0 {
		r.t.Errorf("%s: scratch workspaces left: %v", what, m)
	}
	j, err := journal.Open(r.journal, r.instance, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	es, _, _ := j.List()
	for _, e := range es {
		if e.Open() {
			r.t.Errorf("%s: journal entry %s open (%s)", what, e.LaunchID, e.State)
		}
	}
}

// calls are the emulator's recorded calls, one argv a line.
func (r *sbxRig) calls() string {
	var b strings.Builder
	for _, c := range r.s.Calls(r.t) {
		b.WriteString(strings.Join(c.Argv, " ") + "\n")
	}
	return b.String()
}

func TestSbxExecLifecycle(t *testing.T) {
	r := newSbxRig(t)
	// Each other spelling of the CLI: the same run, nothing left.
	for _, v := range sortedKeys(ktest.SbxVariants) {
		t.Run(v, func(t *testing.T) {
			r := newSbxRig(t, ktest.SbxVariants[v]...)
			res := runCmd(r.exec(nil, "--", "sh", "-c", "echo out"))
			if res.code != 0 || res.stdout != "out\n" {
				t.Errorf("exit %d, stdout %q\nstderr:\n%s", res.code, res.stdout, res.stderr)
			}
			r.assertClean(v)
		})
	}
	for _, tc := range []struct {
		name  string
		extra []string
		code  int
	}{
		{"exit-0", []string{"--", "sh", "-c", "echo out; echo err >&2"}, 0},
		{"exit-7", []string{"--", "sh", "-c", "exit 7"}, 7},
		{"signal-9", []string{"--", "sh", "-c", "kill -KILL $$"}, 128 + 9},
		{"deadline", []string{"--deadline", "1s", "--grace", "200ms", "--", "sleep", "30"}, shared.ExitDeadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCmd(r.exec(nil, tc.extra...))
			t.Logf("exit %d in %v; stderr:\n%s", res.code, res.took.Round(time.Millisecond), res.stderr)
			if res.code != tc.code {
				t.Errorf("exit %d, want %d\nstdout %q", res.code, tc.code, res.stdout)
			}
			if tc.code == 0 && (res.stdout != "out\n" || !strings.Contains(res.stderr, "err")) {
				t.Errorf("stdout %q, stderr %q", res.stdout, res.stderr)
			}
			r.assertClean(tc.name)
		})
	}
}

// The agent: a workspace with a bridge link, the controller's port
// through the scoped rule only, a secret from --env in the spec only.
func TestSbxExecAgent(t *testing.T) {
	for _, v := range []string{"scoped-rules", "scoped-provenance"} {
		t.Run(v, func(t *testing.T) { sbxExecAgent(t, newSbxRig(t, ktest.SbxVariants[v]...)) })
	}
}

func sbxExecAgent(t *testing.T, r *sbxRig) {
	port := hostGreeter(t, "hello-controller")
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "brief.md"), []byte("the brief\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const secret = "s3cr3t-sbx-value-that-must-not-leak"
	p := strconv.Itoa(port)
	agent := `cat /workspace/brief.md; touch /workspace/made-by-agent; nc -w 3 host.docker.internal ` + p +
		`; [ "$TURN_SECRET" = ` + secret + ` ] && echo secret-arrived; id -u`
	res := runCmd(r.exec([]string{"TURN_SECRET=" + secret}, "--mount", ws+":/workspace", "--host-port", p, "--env", "TURN_SECRET", "--", "sh", "-c", agent))
	t.Logf("with the rule: exit %d in %v\nstdout:\n%sstderr:\n%s", res.code, res.took.Round(time.Millisecond), res.stdout, res.stderr)
	for _, want := range []string{"the brief", "hello-controller", "secret-arrived", strconv.Itoa(ktest.AgentUID)} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("agent output lacks %q", want)
		}
	}
	if res.code != 0 {
		t.Errorf("exit %d, want 0", res.code)
	}
	if _, err := os.Stat(filepath.Join(ws, "made-by-agent")); err != nil {
		t.Errorf("the agent's file did not reach the host workspace: %v", err)
	}
	calls := r.calls()
	if !strings.Contains(calls, "policy allow network --sandbox "+sbx.NamePrefix+r.instance) || !strings.Contains(calls, "policy rm network --sandbox "+sbx.NamePrefix+r.instance) {
		t.Errorf("no scoped rule made and removed:\n%s", calls)
	}
	r.assertClean("with the rule")

	// Without --host-port the same port is closed.
	res = runCmd(r.exec(nil, "--mount", ws+":/workspace", "--", "sh", "-c", `nc -w 3 host.docker.internal `+p+` || echo no-reach`))
	if strings.Contains(res.stdout, "hello-controller") || res.code != 0 {
		t.Errorf("without the rule: exit %d, stdout %q (the agent reached the controller)", res.code, res.stdout)
	}
	r.assertClean("without the rule")

	// The secret is in no argv, no recorded call, no forwarder log, no
	// journal file.
	if strings.Contains(calls+r.calls(), secret) {
		t.Errorf("the secret is in an sbx argv")
	}
	for _, f := range []string{"calls.jsonl", "forwarder.log"} {
		if b, _ := os.ReadFile(filepath.Join(r.s.State, f)); bytes.Contains(b, []byte(secret)) {
			t.Errorf("the secret is in the emulator's %s", f)
		}
	}
	filepath.Walk(r.journal, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(secret)) {
				t.Errorf("the secret is in the journal: %s", path)
			}
		}
		return nil
	})
}

// SIGKILL of the supervisor, both ways the kill can reach the VM:
// stdin EOF delivered (the agent tree dies through the exec's EOF), and
// stdin EOF lost (the exec client dies but the in-VM watcher's stdin
// stays open: its heartbeat ends the box within the heartbeat). Then
// reconcile removes the sandbox, stopped by itself by then, and its
// rule, and leaves another instance's sandbox alone.
func TestSbxExecSIGKILL(t *testing.T) {
	t.Run("eof-delivered", func(t *testing.T) {
		sbxExecSIGKILL(t, newSbxRig(t, append(ktest.SbxVariants["scoped-rules"], "SBXEMU_IDLE_STOP=1s")...), 0)
	})
	t.Run("eof-lost", func(t *testing.T) {
		env := append(append([]string(nil), ktest.SbxVariants["scoped-rules"]...), ktest.SbxVariants["eof-lost"]...)
		sbxExecSIGKILL(t, newSbxRig(t, append(env, "SBXEMU_IDLE_STOP=1s")...), 3*time.Second)
	})
}

// sbxExecSIGKILL: heartbeat 0 keeps exec's default and expects the EOF
// to kill at once; otherwise the EOF is lost and the heartbeat kills.
func sbxExecSIGKILL(t *testing.T, r *sbxRig, heartbeat time.Duration) {
	other, err := sbx.SandboxName("other"+r.instance, supervisortest.NewLaunchID())
	if err != nil {
		t.Fatal(err)
	}
	r.s.Run(t, "create", "--name", other, "--template", r.template, sbx.Agent, t.TempDir())
	port := hostGreeter(t, "hello")

	marker := fmt.Sprintf("dw-sbx-kill-%d", time.Now().UnixNano())
	extra := []string{"--host-port", strconv.Itoa(port)}
	if heartbeat > 0 {
		extra = append(extra, "--heartbeat", heartbeat.String())
	}
	cmd := r.exec(nil, append(extra, "--", "sh", "-c", "sleep 1000 & (trap '' TERM; sleep 1000) & echo started; wait", marker)...)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if !ktest.WaitFor(60*time.Second, func() bool { return strings.Contains(out.String(), "started") }) {
		t.Fatalf("the agent did not start; stderr:\n%s", errb.String())
	}
	agent := ktest.WithMarker(marker)
	if len(agent) == 0 {
		t.Fatalf("no agent process carries %s", marker)
	}
	tree := append(agent, ktest.Descendants(agent[0].PID)...)
	killed := time.Now()
	cmd.Process.Kill()
	ceiling := ktest.Slack
	if heartbeat > 0 {
		// The EOF must really be lost: before the heartbeat nothing
		// but the stream's end could kill the agent.
		time.Sleep(heartbeat / 3)
		if _, left := ktest.WaitDead(tree, killed, 0); len(left) == 0 {
			t.Fatalf("the agent died %v after the kill: the EOF reached the watcher (the emulator did not lose it)", heartbeat/3)
		}
		ceiling = heartbeat + ktest.Slack
	}
	took, left := ktest.WaitDead(tree, killed, ceiling)
	cmd.Wait()
	if len(left) > 0 {
		t.Fatalf("agent processes alive %v after the supervisor's SIGKILL: %v", ceiling, left)
	}
	t.Logf("sbx: supervisor SIGKILLed -> agent tree (%d processes) dead in %v (heartbeat %v)", len(tree), took.Round(time.Millisecond), heartbeat)

	// ls shows it: journal open, owner gone, the sandbox present.
	lsOut, err := r.supervisor(nil, "ls", "--json").Output()
	if err != nil {
		t.Fatalf("supervisor ls: %v", err)
	}
	var rows []cli.LsRow
	if err := json.Unmarshal(lsOut, &rows); err != nil || len(rows) != 1 {
		t.Fatalf("ls --json: %v: %s", err, lsOut)
	}
	ktest.CheckOutput(t, ktest.SchemaLs, lsOut)
	if row := rows[0]; row.Runtime != "sbx" || row.Owner != "gone" || row.BoxState == "absent" {
		t.Errorf("ls row %+v", row)
	}
	if len(r.sandboxes(r.instance)) != 1 || len(r.rules()) != 1 {
		t.Fatalf("before reconcile: sandboxes %v, rules %v", r.sandboxes(r.instance), r.rules())
	}

	// The sandbox stops by itself once no session is left (the
	// product's auto-stop): reconcile boots it to read the nonce.
	status := func() string {
		ls, _ := (&sbx.Driver{Run: sbx.CLI{Bin: filepath.Join(r.s.Bin, "sbx"), Env: r.s.Env}}).List(context.Background())
		for _, b := range ls {
			if inst, _, _ := sbx.ParseSandboxName(b.Name); inst == r.instance {
				return b.Status
			}
		}
		return "absent"
	}
	if !ktest.WaitFor(60*time.Second, func() bool { return status() == "stopped" }) {
		t.Errorf("the sandbox did not stop by itself: %s", status())
	}
	t0 := time.Now()
	res := runCmd(r.supervisor(nil, "reconcile"))
	t.Logf("reconcile: exit %d in %v\n%s%s", res.code, res.took.Round(time.Millisecond), res.stdout, res.stderr)
	if res.code != 0 {
		t.Errorf("reconcile exit %d, want 0", res.code)
	}
	t.Logf("sbx: reconcile removed the sandbox and its rule in %v", time.Since(t0).Round(time.Millisecond))
	r.assertClean("after reconcile")
	if got := r.sandboxes("other" + r.instance); len(got) != 1 || got[0] != other {
		t.Errorf("the other instance's sandbox: %v, want %s untouched", got, other)
	}
	if strings.Contains(r.calls(), "rm --force "+other) {
		t.Errorf("reconcile touched the other instance's sandbox")
	}
	r.s.Run(t, "rm", "--force", other)

	// A sandbox with this instance's name but no journal entry is BLOCKED.
	stray, _ := sbx.SandboxName(r.instance, supervisortest.NewLaunchID())
	r.s.Run(t, "create", "--name", stray, "--template", r.template, sbx.Agent, t.TempDir())
	res = runCmd(r.supervisor(nil, "reconcile"))
	if res.code != shared.ExitBlocked || len(r.sandboxes(r.instance)) != 1 {
		t.Errorf("reconcile of an unjournaled sandbox: exit %d, sandboxes %v\n%s%s", res.code, r.sandboxes(r.instance), res.stdout, res.stderr)
	}
	r.s.Run(t, "rm", "--force", stray)
}

// Refusals: one line each, before anything is created.
func TestSbxExecRefusals(t *testing.T) {
	r := newSbxRig(t)
	for _, tc := range []struct {
		name  string
		env   []string
		extra []string
		code  int
		want  string
	}{
		{"network", nil, []string{"--network", "bridge"}, shared.ExitRefused, "--network bridge cannot be honoured"},
		{"no-scope", nil, []string{"--host-port", "8080"}, shared.ExitRefused, "cannot scope a network rule"},
		{"template-missing", nil, nil, shared.ExitImage, "not a loaded template"},
		{"pids-limit", nil, []string{"--pids-limit", "64"}, shared.ExitRefused, "--pids-limit cannot be honoured"},
		{"host-watcher", nil, []string{"--watcher", r.bin.Watcher}, shared.ExitUsage, "cannot take the host's watcher"},
		{"instance", nil, nil, shared.ExitUsage, "cannot name a sandbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(r.s.Calls(t))
			cmd := r.exec(tc.env, append(tc.extra, "--", "true")...)
			switch tc.name {
			case "instance":
				cmd = r.supervisor(nil, "--instance", "Upper_Case", "exec", "--runtime", "sbx", "--template", r.template, "--", "true")
			case "template-missing":
				cmd = r.supervisor(nil, "exec", "--runtime", "sbx", "--template", "not-loaded:1", "--", "true")
			}
			res := runCmd(cmd)
			t.Logf("exit %d: %s", res.code, res.stderr)
			lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
			if res.code != tc.code || len(lines) != 1 || !strings.Contains(res.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and one line with %q", res.code, res.stderr, tc.code, tc.want)
			}
			for _, c := range r.s.Calls(t)[before:] {
				if c.Argv[1] == "create" && tc.name != "template-missing" || c.Argv[1] == "policy" && c.Argv[2] == "allow" && !slices.Contains(c.Argv, "--help") {
					t.Errorf("something was created: %q", c.Argv)
				}
			}
			r.assertClean(tc.name)
		})
	}
}

// An exec user without root in the VM: the watcher refuses (243), the
// agent never runs, the sandbox is removed.
func TestSbxExecNotRoot(t *testing.T) {
	r := newSbxRig(t)
	marker := fmt.Sprintf("dw-sbx-notroot-%d", time.Now().UnixNano())
	res := runCmd(r.exec([]string{sbx.ExecUserEnv + "=1000"}, "--", "sh", "-c", "echo ran; sleep 1000", marker))
	t.Logf("exit %d\nstdout %q\nstderr:\n%s", res.code, res.stdout, res.stderr)
	if res.code != shared.ExitRefused || !strings.Contains(res.stderr, "not root in the box") {
		t.Errorf("exit %d, want %d with the watcher's refusal", res.code, shared.ExitRefused)
	}
	if strings.Contains(res.stdout, "ran") || len(ktest.WithMarker(marker)) > 0 {
		t.Errorf("the agent ran under a non-root exec user")
	}
	r.assertClean("not root")
}

// prove-deathwatch and doctor through the registry: prove counts the
// agent's processes from inside the sandbox (the host cannot see a VM's)
// and measures the removal (the supervisor's own on the controller path,
// reconcile's on the others); doctor lists sbx.
func TestSbxExecProveDoctor(t *testing.T) {
	r := newSbxRig(t)
	res := runCmd(r.supervisor(nil, "prove-deathwatch", "--runtime", "sbx", "--image", r.template, "--trials", "2", "--json"))
	t.Logf("prove: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	var proof struct {
		Pass bool
		Rows []struct {
			Path, Measure string
			N             int           `json:"trials"`
			Max           time.Duration `json:"max_ns"`
			Pass          bool
		}
	}
	if err := json.Unmarshal([]byte(res.stdout), &proof); err != nil {
		t.Fatalf("prove --json: %v", err)
	}
	ktest.CheckOutput(t, ktest.SchemaProve, []byte(res.stdout))
	if res.code != 0 || !proof.Pass || len(proof.Rows) != 8 { // four paths (controller, sigkill, heartbeat, deadline) × dead, removed
		t.Errorf("prove-deathwatch --runtime sbx: exit %d, pass %v, %d rows", res.code, proof.Pass, len(proof.Rows))
	}
	for _, row := range proof.Rows {
		t.Logf("sbx prove %s %s: max %v over %d trials (pass %v)", row.Path, row.Measure, row.Max.Round(time.Millisecond), row.N, row.Pass)
	}
	if left := r.sandboxes(r.instance + ".prove"); len(left) > 0 {
		t.Errorf("prove left sandboxes: %v", left)
	}
	res = runCmd(r.supervisor(nil, "doctor", "--runtime", "sbx", "--image", r.template, "--skip-proof", "--posture", "preferred", "--json"))
	t.Logf("doctor: exit %d\n%s", res.code, res.stderr)
	var rep struct {
		Runtimes []struct {
			Name   string
			Usable bool
		}
	}
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, res.stdout)
	}
	ktest.CheckOutput(t, ktest.SchemaDoctor, []byte(res.stdout))
	found := false
	for _, rt := range rep.Runtimes {
		if rt.Name == "sbx" {
			found = true
			if !rt.Usable {
				t.Errorf("doctor: sbx not usable on the emulator: %s", res.stdout)
			}
		}
	}
	if !found {
		t.Errorf("doctor does not list sbx:\n%s", res.stdout)
	}
	// The current CLI: its version, signed in, a policy, and what
	// --host-port does there.
	if st := doctorStatus(t, []byte(res.stdout), "sbx"); !strings.Contains(st, "signed in, default network policy set") || !strings.Contains(st, "--host-port refused") {
		t.Errorf("doctor's sbx status: %q", st)
	}
	r.assertClean("prove and doctor")
}

// TestSbxExecCopy: --copy-in and --copy-out on sbx, where the watcher is
// not PID 1 of the sandbox but runs under `sbx exec`: a tree with every
// kind of file goes in owned by the agent and comes back byte for byte
// beside its manifest; a symlink the agent plants to a host path does not
// come back live; nothing of the launch is left.
func TestSbxExecCopy(t *testing.T) {
	r := newSbxRig(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "in", "tree")
	copyTree(t, src, 16<<20)
	out := filepath.Join(dir, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dir, "host-only")
	if err := os.WriteFile(secretFile, []byte("host data\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := `cd /tmp/tree && find . | while read -r p; do stat -c '%u:%g' "$p"; done | sort -u && ./run.sh && cat link && ln -s ` + secretFile + ` planted`
	res := runCmd(r.exec(nil, "--copy-in", src+":/tmp/tree", "--copy-out", "/tmp/tree:"+out, "--", "sh", "-c", agent))
	if res.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	if want := fmt.Sprintf("%d:%d\nran\nhello\n", ktest.AgentUID, ktest.AgentUID); res.stdout != want {
		t.Errorf("inside the sandbox:\n%s\nwant:\n%s", res.stdout, want)
	}
	assertSameTree(t, src, filepath.Join(out, "tree"))
	if !strings.Contains(res.stderr, "planted") {
		t.Errorf("the refused symlink is not named on stderr:\n%s", res.stderr)
	}
	checkManifest(t, filepath.Join(out, "tree.manifest"), filepath.Join(out, "tree"))
	t.Logf("sbx copy in and out: %v", res.took.Round(time.Millisecond))
	r.assertClean("after the copies")
}

// First use and a wedged daemon: exec stops before anything exists,
// with one line that says what to run, in the time its calls' bounds
// allow.
func TestSbxExecFirstUse(t *testing.T) {
	r := newSbxRig(t)
	setUp := func() {
		r.s.Run(t, "login")
		r.s.Run(t, "policy", "set-default", "deny-all")
	}
	for _, tc := range []struct {
		name string
		prep func()
		env  []string
		want string
	}{
		{"not-signed-in", func() { r.s.Run(t, "logout") }, nil, "`sbx login`"},
		{"no-default-policy", func() { r.s.Run(t, "policy", "reset") }, nil, "`sbx policy set-default balanced`"},
		{"wedged", func() {}, []string{"SBXEMU_WEDGE=1"}, "no answer in time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(r.s.Calls(t))
			tc.prep()
			res := runCmd(r.exec(tc.env, "--", "true"))
			setUp()
			t.Logf("exit %d in %v: %s", res.code, res.took.Round(time.Millisecond), res.stderr)
			lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
			if res.code != shared.ExitEngine || len(lines) != 1 || !strings.Contains(res.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and one line with %q", res.code, res.stderr, shared.ExitEngine, tc.want)
			}
			if res.took > 3*time.Minute {
				t.Errorf("exec took %v", res.took)
			}
			for _, c := range r.s.Calls(t)[before:] {
				if c.Argv[1] == "create" {
					t.Errorf("something was created: %q", c.Argv)
				}
			}
			r.assertClean(tc.name)
			if tc.env != nil {
				return // doctor would wait out the same bounds
			}
			// doctor says the same, in sbx's status.
			tc.prep()
			out, _ := r.supervisor(nil, "doctor", "--runtime", "sbx", "--image", r.template, "--skip-proof", "--posture", "preferred", "--json").Output()
			setUp()
			if st := doctorStatus(t, out, "sbx"); !strings.Contains(st, tc.want) {
				t.Errorf("doctor's sbx status %q lacks %q", st, tc.want)
			}
		})
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// doctorStatus is the status doctor --json gives the runtime.
func doctorStatus(t *testing.T, out []byte, name string) string {
	t.Helper()
	var rep struct {
		Runtimes []struct{ Name, Status, Version string }
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	for _, rt := range rep.Runtimes {
		if rt.Name == name {
			return rt.Version + " " + rt.Status
		}
	}
	return ""
}
