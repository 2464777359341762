//go:build linux

package cli

import (
	"bytes"
	"deathwatch/supervisor/journal"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// syncBuf is a bytes.Buffer safe for the relay goroutine and the test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type execRun struct {
	code           int
	stdout, stderr string
	events         []supervisor.Event
	journal        string
}

// runExec runs `supervisor --journal J exec ARGS` in process against the
// fake engine. sigs may be nil.
func runExec(t *testing.T, fe *fakeEngine, sigs chan os.Signal, args ...string) execRun {
	t.Helper()
	jdir := filepath.Join(fe.dir, "journal")
	evf := filepath.Join(fe.dir, "events.jsonl")
	os.Remove(evf)
	var out, errb syncBuf
	if sigs == nil {
		sigs = make(chan os.Signal)
	}
	full := append([]string{"--journal", jdir, "exec", "--watcher", filepath.Join(fe.bin, "watcher"), "--events", evf}, args...)
	code := run(full, &cmdContext{stdout: &out, stderr: &errb, signals: sigs, getenv: os.LookupEnv})
	r := execRun{code: code, stdout: out.String(), stderr: errb.String(), journal: jdir}
	b, _ := os.ReadFile(evf)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var ev supervisor.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("event line %q: %v", line, err)
		}
		r.events = append(r.events, ev)
	}
	return r
}

func (r execRun) eventNames() []string {
	var n []string
	for _, e := range r.events {
		n = append(n, e.Event)
	}
	return n
}

func journalEntries(t *testing.T, dir string) []*journal.Entry {
	t.Helper()
	j, err := journal.Open(dir, "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	es, bad, err := j.List()
	if err != nil || len(bad) > 0 {
		t.Fatalf("journal: %v %v", err, bad)
	}
	return es
}

// verbs is each call's first argument; the probe and the image check
// run side by side, so the first two are sorted.
func verbs(calls [][]string) []string {
	var v []string
	for _, c := range calls {
		v = append(v, c[1])
	}
	if len(v) >= 2 {
		slices.Sort(v[:2])
	}
	return v
}

var docker = []string{"--runtime", "docker", "--allow-rootful", "--image", "img"}

func TestExecExitStatus(t *testing.T) {
	all := []string{supervisor.EventJournaled, supervisor.EventCreated, supervisor.EventStarted, supervisor.EventReady, supervisor.EventExited, supervisor.EventRemoved}
	for _, tc := range []struct {
		agent  string
		code   int
		events []string
	}{
		{"exit:0", 0, all},
		{"exit:7", 7, all},
		{"exit:137", 137, all},
		{"deadline", shared.ExitDeadline, all},
		{"exec-fail", shared.ExitNotFound, []string{supervisor.EventJournaled, supervisor.EventCreated, supervisor.EventStarted, supervisor.EventExited, supervisor.EventRemoved}},
	} {
		t.Run(tc.agent, func(t *testing.T) {
			fe := newFakeEngine(t, fakeScenario{Agent: tc.agent, Stdout: "out\n", Stderr: "err\n"})
			r := runExec(t, fe, nil, append(docker, "--", "agent", "arg")...)
			if r.code != tc.code {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", r.code, tc.code, r.stderr)
			}
			if !slices.Equal(r.eventNames(), tc.events) {
				t.Errorf("events %v, want %v", r.eventNames(), tc.events)
			}
			// The engine's --rm removed the box: the listing says so, and
			// no rm is needed.
			if got := verbs(fe.calls()); !slices.Equal(got, []string{"image", "info", "create", "start", "ps"}) {
				t.Errorf("engine calls %v", got)
			}
			if b := fe.boxes(); len(b) != 0 {
				t.Errorf("boxes left: %v", b)
			}
			es := journalEntries(t, r.journal)
			if len(es) != 1 || es[0].State != journal.StateRemoved || es[0].Exit == nil || es[0].Exit.Code != tc.code {
				t.Fatalf("journal: %+v", es[0])
			}
			e := es[0]
			if e.Labels[shared.LabelNonce] != e.Nonce || fe.file("nonce") != e.Nonce || e.Owner.PID != os.Getpid() || e.Owner.StartTime == 0 {
				t.Errorf("journal entry identity: %+v (hello nonce %q)", e, fe.file("nonce"))
			}
			if fe.file("agent-argv") != "agent\narg" {
				t.Errorf("agent argv %q", fe.file("agent-argv"))
			}
			if tc.agent != "exec-fail" && (r.stdout != "out\n" || !strings.Contains(r.stderr, "err\n")) {
				t.Errorf("relayed stdout %q stderr %q", r.stdout, r.stderr)
			}
			last := r.events[len(r.events)-2]
			if last.Code == nil || *last.Code != tc.code {
				t.Errorf("exited event %+v", last)
			}
		})
	}
}

func TestExecPodman(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remote bool
		args   []string
		probe  string
	}{
		// Local podman: rootless exactly when not root, no probe call;
		// one `podman run` creates and starts the box (--allow-rootful:
		// the unit tests may run as root).
		{"local", false, []string{"--allow-rootful"}, "run"},
		// A remote service: only `podman info` knows.
		{"remote rootless", true, nil, "info"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := newFakeEngine(t, fakeScenario{Agent: "exit:3", Rootless: true})
			if tc.remote {
				t.Setenv("CONTAINER_HOST", "unix:///run/podman/podman.sock")
			}
			args := append(append([]string{"--runtime", "podman", "--image", "img"}, tc.args...), "--", "true")
			r := runExec(t, fe, nil, args...)
			if r.code != 3 {
				t.Fatalf("exit status %d; stderr %s", r.code, r.stderr)
			}
			calls := fe.calls()
			if v := verbs(calls); !slices.Contains(v[:min(2, len(v))], tc.probe) {
				t.Errorf("probe calls %v, want %s", v[:2], tc.probe)
			}
			if !tc.remote {
				// One podman process per launch: the run, whose own end
				// proves the box removed (TestPodmanOneProcessPerLaunch
				// counts the real one's).
				if v := verbs(calls); !slices.Equal(v, []string{"run"}) {
					t.Errorf("calls %v, want the run alone", calls)
				}
				if b := fe.boxes(); len(b) != 0 {
					t.Errorf("boxes left: %v", b)
				}
				if es := journalEntries(t, r.journal); len(es) != 1 || es[0].State != journal.StateRemoved {
					t.Errorf("journal %+v", es)
				}
				return
			}
			look := calls[len(calls)-1]
			if !slices.Equal(look, []string{"podman", "ps", "--all", "--no-trunc", "--filter", "name=" + r.events[0].Box, "--format", "{{.Names}}"}) {
				t.Errorf("last call %v: want the name lookup that finds the box gone", look)
			}
		})
	}
}

func TestExecRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		sc   fakeScenario
		args []string
		path string // PATH override
		code int
		want string
	}{
		{"rootful", fakeScenario{Agent: "exit:0"}, []string{"--runtime", "docker", "--image", "img", "--", "true"}, "", shared.ExitRefused, "--allow-rootful"},
		{"daemon down", fakeScenario{InfoFail: "Cannot connect to the Docker daemon at unix:///nope.sock. Is the docker daemon running?"}, append(slices.Clone(docker), "--", "true"), "", shared.ExitEngine, "Is the docker daemon running?"},
		{"engine missing", fakeScenario{}, append(slices.Clone(docker), "--", "true"), "empty", shared.ExitEngine, "docker is not installed"},
		{"image missing", fakeScenario{NoImage: true}, append(slices.Clone(docker), "--", "true"), "", shared.ExitImage, "image img not found"},
		{"agent root", fakeScenario{}, append(slices.Clone(docker), "--user", "0:0", "--", "true"), "", shared.ExitRefused, "root"},
		{"no image flag", fakeScenario{}, []string{"--runtime", "docker", "--allow-rootful", "--", "true"}, "", shared.ExitUsage, "--image is required"},
		{"no command", fakeScenario{}, append(slices.Clone(docker), "--"), "", shared.ExitUsage, "name the agent command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := newFakeEngine(t, tc.sc)
			if tc.path == "empty" {
				t.Setenv("PATH", t.TempDir())
			}
			r := runExec(t, fe, nil, tc.args...)
			if r.code != tc.code {
				t.Fatalf("exit status %d, want %d; stderr %q", r.code, tc.code, r.stderr)
			}
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) || !strings.HasPrefix(lines[0], "supervisor: ") {
				t.Errorf("stderr %q: want one line with %q", r.stderr, tc.want)
			}
			if slices.Contains(verbs(fe.calls()), "create") || len(fe.boxes()) != 0 {
				t.Errorf("something was created: %v", fe.calls())
			}
			if _, err := os.Stat(r.journal); err == nil && len(journalEntries(t, r.journal)) != 0 {
				t.Errorf("journal entries were written")
			}
			if len(r.events) != 0 {
				t.Errorf("events: %v", r.eventNames())
			}
		})
	}
}

func TestExecCreateFails(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{CreateFail: "Error response from daemon: Conflict. The container name is already in use"})
	r := runExec(t, fe, nil, append(docker, "--", "true")...)
	if r.code != shared.ExitSetupFailed {
		t.Fatalf("exit status %d; stderr %q", r.code, r.stderr)
	}
	if got := verbs(fe.calls()); !slices.Equal(got, []string{"image", "info", "create", "ps"}) {
		t.Errorf("engine calls %v", got)
	}
	es := journalEntries(t, r.journal)
	if len(es) != 1 || es[0].State != journal.StateRemoved {
		t.Errorf("journal %+v", es)
	}
	if !strings.Contains(r.stderr, "already in use") {
		t.Errorf("stderr %q", r.stderr)
	}
	if n := r.eventNames(); !slices.Equal(n, []string{supervisor.EventJournaled, supervisor.EventExited, supervisor.EventRemoved}) || *r.events[1].Code != shared.ExitSetupFailed {
		t.Errorf("events %v", n)
	}
	if es[0].Exit == nil || es[0].Exit.Reason != string(shared.ReasonSetupFailed) {
		t.Errorf("journal exit %+v", es[0].Exit)
	}
}

// waitFile waits until the fake engine wrote name.
func waitFile(t *testing.T, fe *fakeEngine, name string) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if fe.exists(name) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("fake engine never wrote %s", name)
}

func TestExecSignals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		agent   string
		signals []syscall.Signal
		code    int
	}{
		{"SIGTERM stops", "sleep", []syscall.Signal{syscall.SIGTERM}, 143},
		{"SIGINT stops", "sleep", []syscall.Signal{syscall.SIGINT}, 143},
		{"second signal ends at once", "ignore-stop", []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}, 128 + 15},
		// USR1 goes to the agent and stops nothing; the TERM after it does.
		{"USR1 forwarded", "sleep", []syscall.Signal{syscall.SIGUSR1, syscall.SIGTERM}, 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := newFakeEngine(t, fakeScenario{Agent: tc.agent})
			sigs := make(chan os.Signal, 2)
			done := make(chan execRun)
			go func() { done <- runExec(t, fe, sigs, append(docker, "--grace", "30s", "--", "sleep", "100")...) }()
			waitFile(t, fe, "running")
			stopped := false
			for _, s := range tc.signals {
				sigs <- s
				if s == syscall.SIGUSR1 || s == syscall.SIGUSR2 { // passed on to the agent
					waitFile(t, fe, fmt.Sprintf("signal-%d", int(s)))
					if fe.exists("stop") {
						t.Fatalf("%v sent stop", s)
					}
					continue
				}
				if !stopped {
					waitFile(t, fe, "stop")
					stopped = true
				}
			}
			var r execRun
			select {
			case r = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("supervisor did not return")
			}
			if r.code != tc.code {
				t.Fatalf("exit status %d, want %d; stderr %q", r.code, tc.code, r.stderr)
			}
			if len(fe.boxes()) != 0 {
				t.Errorf("boxes left: %v", fe.boxes())
			}
			es := journalEntries(t, r.journal)
			if len(es) != 1 || es[0].State != journal.StateRemoved {
				t.Errorf("journal %+v", es)
			}
			if n := r.eventNames(); n[len(n)-1] != supervisor.EventRemoved {
				t.Errorf("events %v", n)
			}
		})
	}
}

func TestExecHeartbeat(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{Agent: "sleep"})
	sigs := make(chan os.Signal, 1)
	done := make(chan execRun)
	go func() { done <- runExec(t, fe, sigs, append(docker, "--heartbeat", "60ms", "--", "sleep", "100")...) }()
	waitFile(t, fe, "pinged")
	sigs <- syscall.SIGTERM
	if r := <-done; r.code != 143 {
		t.Fatalf("exit status %d; stderr %q", r.code, r.stderr)
	}
}

// The secret reaches the agent's environment (the spec frame) and
// nothing else: not the engine's argv, the journal, the events, the
// output, any process's command line.
func TestExecSecretsOnlyInSpec(t *testing.T) {
	const secret = "s3cr3t-value-7f1c9a"
	t.Setenv("DW_TEST_TOKEN", secret)
	envFile := filepath.Join(t.TempDir(), "env")
	os.WriteFile(envFile, []byte("# comment\nFROM_FILE="+secret+"-file\n"), 0o600)
	fe := newFakeEngine(t, fakeScenario{Agent: "sleep"})
	sigs := make(chan os.Signal, 1)
	done := make(chan execRun)
	go func() {
		done <- runExec(t, fe, sigs, append(docker, "--env", "DW_TEST_TOKEN", "--env-file", envFile, "--", "sleep", "100")...)
	}()
	waitFile(t, fe, "running")
	// Every command line on the host while the box runs, and every
	// environment but this process's (the supervisor here): the engine
	// client does not inherit the agent's variables.
	ms, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, m := range ms {
		if b, _ := os.ReadFile(m); bytes.Contains(b, []byte(secret)) {
			t.Errorf("secret in %s: %q", m, b)
		}
		env := filepath.Join(filepath.Dir(m), "environ")
		if filepath.Dir(m) == fmt.Sprintf("/proc/%d", os.Getpid()) {
			continue
		}
		if b, _ := os.ReadFile(env); bytes.Contains(b, []byte(secret)) {
			t.Errorf("secret in %s", env)
		}
	}
	sigs <- syscall.SIGTERM
	r := <-done
	if r.code != 143 {
		t.Fatalf("exit status %d; stderr %q", r.code, r.stderr)
	}
	if env := fe.file("agent-env"); !strings.Contains(env, "DW_TEST_TOKEN="+secret) || !strings.Contains(env, "FROM_FILE="+secret+"-file") {
		t.Errorf("agent env %q lacks the secrets", env)
	}
	check := func(what, s string) {
		if strings.Contains(s, secret) {
			t.Errorf("secret in %s", what)
		}
	}
	check("engine argv", fmt.Sprint(fe.calls()))
	check("stdout", r.stdout)
	check("stderr", r.stderr)
	b, _ := os.ReadFile(filepath.Join(fe.dir, "events.jsonl"))
	check("events", string(b))
	filepath.Walk(r.journal, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(p)
			check("journal "+p, string(b))
		}
		return nil
	})
}

// SIGKILL of the supervisor: the engine client sees EOF on its stdin
// (the supervisor held the only write end), the watcher kills the box,
// auto-remove removes it; the journal entry stays open for reconcile.
func TestExecSupervisorSIGKILL(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{Agent: "sleep"})
	jdir := filepath.Join(fe.dir, "journal")
	evf := filepath.Join(fe.dir, "events.jsonl")
	cmd := exec.Command(fe.super, append([]string{"--journal", jdir, "exec", "--watcher", filepath.Join(fe.bin, "watcher"), "--events", evf}, append(docker, "--", "sleep", "100")...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, fe, "running")
	t0 := time.Now()
	cmd.Process.Kill()
	cmd.Wait()
	waitFile(t, fe, "liveness-lost")
	for len(fe.boxes()) != 0 {
		if time.Since(t0) > 10*time.Second {
			t.Fatalf("box not removed: %v", fe.boxes())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("fake engine: liveness lost and box removed %v after SIGKILL", time.Since(t0))
	es := journalEntries(t, jdir)
	if len(es) != 1 || es[0].State != journal.StateStarted || !es[0].Open() || es[0].Owner.Alive() {
		t.Errorf("journal %+v", es)
	}
}

// journalSays reports whether an entry of the journal in dir is in state.
func journalSays(dir, state string) bool {
	es, _ := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	more, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, p := range append(es, more...) {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), `"state":"`+state+`"`) {
			return true
		}
	}
	return false
}

// ls shows the journal's open entries with the engine's view of them,
// and boxes of the instance that the journal does not know.
func TestLs(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{Agent: "sleep", NoRemove: true})
	jdir := filepath.Join(fe.dir, "journal")
	// Its own instance: ls asks every runtime, the host's native boxes too.
	cmd := exec.Command(fe.super, append([]string{"--instance", "ls-unit", "--journal", jdir, "exec", "--watcher", filepath.Join(fe.bin, "watcher")}, append(docker, "--", "sleep", "100")...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, fe, "running")
	// The started entry is written beside the watcher's handshake: the
	// kill comes once it landed.
	for i := 0; i < 200 && !journalSays(jdir, journal.StateStarted); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// A box with the instance label that no journal entry knows.
	os.WriteFile(filepath.Join(fe.dir, "boxes-docker", "stray"), []byte(`{"io.deathwatch.instance":"ls-unit"}`), 0o600)
	var out, errb syncBuf
	code := run([]string{"--instance", "ls-unit", "--journal", jdir, "ls", "--json"}, &cmdContext{stdout: &out, stderr: &errb, getenv: os.LookupEnv})
	if code != 0 {
		t.Fatalf("ls: %d %s", code, errb.String())
	}
	var rows []LsRow
	if err := json.Unmarshal([]byte(out.String()), &rows); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, out.String())
	}
	if len(rows) != 2 {
		t.Fatalf("rows %+v", rows)
	}
	byJournal := map[string]LsRow{}
	for _, r := range rows {
		byJournal[r.Journal] = r
	}
	if r := byJournal[journal.StateStarted]; r.Owner != "gone" || r.BoxState != "running" || r.Runtime != "docker" {
		t.Errorf("killed launch: %+v", r)
	}
	if r := byJournal["none"]; r.Box != "stray" || r.BoxState != "running" {
		t.Errorf("stray box: %+v", r)
	}
	out = syncBuf{}
	if code := run([]string{"--instance", "ls-unit", "--journal", jdir, "ls"}, &cmdContext{stdout: &out, stderr: &errb, getenv: os.LookupEnv}); code != 0 || !strings.Contains(out.String(), "BOX") || !strings.Contains(out.String(), "stray") {
		t.Errorf("ls table: %d %q", code, out.String())
	}
}

// --events fd:N writes to an inherited descriptor.
func TestEventsFD(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// A descriptor of its own: Events closes it, and w must not close
	// the same number again later.
	fd, err := syscall.Dup(int(w.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	ev, err := supervisor.OpenEvents(fmt.Sprintf("fd:%d", fd), false)
	if err != nil {
		t.Fatal(err)
	}
	ev.Emit(supervisor.Event{Event: supervisor.EventJournaled, Box: "b"})
	ev.Close()
	b := make([]byte, 4096)
	n, _ := r.Read(b)
	var got supervisor.Event
	if err := json.Unmarshal(b[:n], &got); err != nil || got.Event != supervisor.EventJournaled || got.Box != "b" || got.Time.IsZero() {
		t.Errorf("event %q: %v", b[:n], err)
	}
	for _, bad := range []string{"fd:x", "fd:-1", "fd:999"} {
		if _, err := supervisor.OpenEvents(bad, false); exitcode.Of(err, 0) != shared.ExitUsage {
			t.Errorf("supervisor.OpenEvents(%q): %v", bad, err)
		}
	}
}

// auto takes a rootless engine first: here docker (the fake reports
// rootless), while podman run as root is rootful.
func TestExecAutoPicksRootless(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs a rootful local podman: run as root")
	}
	fe := newFakeEngine(t, fakeScenario{Agent: "exit:5", Rootless: true})
	r := runExec(t, fe, nil, "--runtime", "auto", "--image", "img", "--", "true")
	if r.code != 5 || len(r.events) == 0 || r.events[0].Runtime != "docker" {
		t.Fatalf("exit %d, events %+v; stderr %s", r.code, r.events, r.stderr)
	}
}

// auto picks an engine only when it has the image: local podman (first
// in auto's order, driven by one `podman run`) lacks it, docker has it;
// one line says what auto chose and what it passed over.
func TestExecAutoNeedsImage(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{Agent: "exit:0", NoImageIn: "podman"})
	r := runExec(t, fe, nil, "--runtime", "auto", "--allow-rootful", "--image", "img", "--", "true")
	if r.code != 0 || len(r.events) == 0 || r.events[0].Runtime != "docker" {
		t.Fatalf("exit %d, events %+v; stderr %s", r.code, r.events, r.stderr)
	}
	var line string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.Contains(l, "--runtime auto chose") {
			line = l
		}
	}
	if !strings.Contains(line, "chose docker (rootful, accepted by --allow-rootful, image img present)") || !strings.Contains(line, "image img not found in podman") {
		t.Errorf("auto's line %q; stderr %s", line, r.stderr)
	}
	// No engine has it: the image's exit status, not the engine's.
	fe = newFakeEngine(t, fakeScenario{Agent: "exit:0", NoImage: true})
	r = runExec(t, fe, nil, "--runtime", "auto", "--allow-rootful", "--image", "img", "--", "true")
	if r.code != shared.ExitImage {
		t.Errorf("no engine with the image: exit %d, want %d; stderr %s", r.code, shared.ExitImage, r.stderr)
	}
}

// The ways a box can end without the watcher's exit record.
func TestExecNoExitRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		sc   fakeScenario
		code int
		want string
	}{
		{"stream ends after ready", fakeScenario{Agent: "vanish"}, shared.ExitLivenessLost, "without an exit record"},
		{"box never starts", fakeScenario{Agent: "exit:0", StartFail: "Error response from daemon: OCI runtime create failed: no such file"}, shared.ExitSetupFailed, "OCI runtime create failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := newFakeEngine(t, tc.sc)
			r := runExec(t, fe, nil, append(docker, "--", "true")...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d stderr %q, want %d and %q", r.code, r.stderr, tc.code, tc.want)
			}
			if len(fe.boxes()) != 0 {
				t.Errorf("boxes left: %v", fe.boxes())
			}
			if es := journalEntries(t, r.journal); es[0].State != journal.StateRemoved || es[0].Exit.Code != tc.code {
				t.Errorf("journal %+v", es[0])
			}
		})
	}
}

// rm that meets the engine's own auto-remove waits until the box is gone.
func TestExecRemoveInProgress(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{Agent: "exit:0", RmInProgress: true})
	r := runExec(t, fe, nil, append(docker, "--", "true")...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if v := verbs(fe.calls()); !slices.Equal(v[len(v)-3:], []string{"ps", "rm", "ps"}) {
		t.Errorf("calls %v: want the box listed, rm, then the listing without it", v)
	}
	if es := journalEntries(t, r.journal); es[0].State != journal.StateRemoved {
		t.Errorf("journal %+v", es[0])
	}
}

// --runtime auto probes podman (`podman version`) before it picks it:
// a podman that is on PATH but does not work must not win over the next
// runtime. A named --runtime podman does not (TestExecPodman).
func TestExecAutoProbesPodman(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{Agent: "exit:0"})
	runExec(t, fe, nil, "--runtime", "auto", "--allow-rootful", "--image", "img", "--", "true")
	if !slices.ContainsFunc(fe.calls(), func(c []string) bool { return c[0] == "podman" && c[1] == "version" }) {
		t.Errorf("calls %v: podman not probed", fe.calls())
	}
}

// A `podman run --rm` whose own removal failed says so on stderr and
// exits with the box's status: the listing then proves, and rm removes
// what is left.
func TestExecPodmanRunRemoveFails(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{Agent: "exit:0", RunRmFail: `time="2026-01-01T00:00:00Z" level=error msg="Removing container 0123: cleaning up storage: device busy"`})
	r := runExec(t, fe, nil, "--runtime", "podman", "--allow-rootful", "--image", "img", "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "Removing container 0123") {
		t.Fatalf("exit %d stderr %q, want 0 and podman's line", r.code, r.stderr)
	}
	if v := verbs(fe.calls()); !slices.Equal(v, []string{"ps", "run", "rm"}) {
		t.Errorf("calls %v: want the run, the listing that finds the box, its rm", fe.calls())
	}
	if b := fe.boxes(); len(b) != 0 {
		t.Errorf("boxes left: %v", b)
	}
	if es := journalEntries(t, r.journal); len(es) != 1 || es[0].State != journal.StateRemoved {
		t.Errorf("journal %+v", es)
	}
}

// Local podman finds a missing image in its one `podman run`: the
// image is asked after only once the run failed without creating
// anything; the user reads one line (podman's own is held back), and
// the journal entry the run needed first is closed with the image's
// exit status.
func TestExecPodmanImageMissing(t *testing.T) {
	fe := newFakeEngine(t, fakeScenario{NoImage: true})
	r := runExec(t, fe, nil, "--runtime", "podman", "--allow-rootful", "--image", "img", "--", "true")
	if r.code != shared.ExitImage || strings.TrimSpace(r.stderr) != "supervisor: image img not found in podman; build or load it first (deathwatch never pulls)" {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
	var v []string
	for _, c := range fe.calls() {
		v = append(v, c[1])
	}
	if !slices.Equal(v, []string{"run", "image", "ps"}) {
		t.Errorf("calls %v: want the run, the image check after it, the listing", fe.calls())
	}
	if es := journalEntries(t, r.journal); len(es) != 1 || es[0].State != journal.StateRemoved || es[0].Exit == nil || es[0].Exit.Code != shared.ExitImage {
		t.Errorf("journal %+v", es)
	}
}

// A `podman run` that fails before the box exists (its cidfile) says
// podman's first line as the create failure; one that fails after is
// the box that never started, as with separate create and start.
func TestExecPodmanRunFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		sc   fakeScenario
		want string
	}{
		{"create", fakeScenario{CreateFail: "Error: creating container storage: the container name is already in use"}, "create box dw-"},
		{"start", fakeScenario{Agent: "exit:0", StartFail: "Error: OCI runtime error: runc: no such file"}, "the box ended before the agent started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := newFakeEngine(t, tc.sc)
			r := runExec(t, fe, nil, "--runtime", "podman", "--allow-rootful", "--image", "img", "--", "true")
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			last := lines[len(lines)-1]
			if r.code != shared.ExitSetupFailed || !strings.Contains(last, tc.want) || !strings.Contains(r.stderr, strings.TrimPrefix(tc.sc.CreateFail+tc.sc.StartFail, "Error: ")) {
				t.Fatalf("exit %d stderr %q, want %d and %q", r.code, r.stderr, shared.ExitSetupFailed, tc.want)
			}
			if tc.name == "create" && len(lines) != 1 {
				t.Errorf("stderr %q: want one line", r.stderr)
			}
			if len(fe.boxes()) != 0 {
				t.Errorf("boxes left: %v", fe.boxes())
			}
			if es := journalEntries(t, r.journal); es[0].State != journal.StateRemoved {
				t.Errorf("journal %+v", es[0])
			}
		})
	}
}
