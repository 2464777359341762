package kerneltests

// supervisor exec against the real engines: Docker (rootful, so
// --allow-rootful), rootful Podman (--allow-rootful) and rootless Podman
// run by ktest.RootlessUser (no flag: it is rootless). Each scenario of
// the fake-engine unit tests in supervisor/ runs here for real.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"deathwatch/supervisor/journal"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/cli"
	"deathwatch/supervisor/idslot"
)

// engineRigs are the rigs of the engines: docker, podman, rootless podman.
var engineRigs = []string{"docker", "podman", "podman-rootless", "docker-rootless"}

// forEngine runs f once per engine, each with its own instance and journal.
func forEngine(t *testing.T, f func(t *testing.T, r *rig)) {
	for _, proto := range rigs(t, engineRigs...) {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.Setup(t, "kt")
			t.Cleanup(func() { r.removeLeftovers() })
			f(t, &r)
		})
	}
}

func (r *rig) eventsFile() string { return filepath.Join(r.Dir, "events.jsonl") }

// supervisor returns `supervisor --instance I --journal J exec FLAGS... args...`
// as the rig's user. As the rootless user it goes through setpriv, which
// execs: the pid of the command is the supervisor's.
func (r *rig) supervisor(env []string, args ...string) *exec.Cmd {
	return r.Command(env, r.Bin.Supervisor, r.ExecArgs(r.Instance, append([]string{"--events", r.eventsFile()}, args...)...)...)
}

func (r *rig) removeLeftovers() {
	for _, b := range r.boxes(r.Instance) {
		r.T.Errorf("left behind: box %s", b)
		r.Engine("rm", "-f", b).Run()
	}
}

func (r *rig) events() []supervisor.Event {
	b, _ := os.ReadFile(r.eventsFile())
	ktest.CheckEvents(r.T, b)
	var evs []supervisor.Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var ev supervisor.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			r.T.Fatalf("event %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// waitEvent waits for the named event and returns it.
func (r *rig) waitEvent(name string, within time.Duration) supervisor.Event {
	r.T.Helper()
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		for _, ev := range r.events() {
			if ev.Event == name {
				return ev
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.T.Fatalf("no %s event within %v; events: %+v", name, within, r.events())
	return supervisor.Event{}
}

// assertClean: no box of this instance, every journal entry closed.
func (r *rig) assertClean() {
	r.T.Helper()
	if b := r.boxes(r.Instance); len(b) != 0 {
		r.T.Errorf("boxes left: %v", b)
	}
	for _, e := range r.entries(r.Instance) {
		if e.Open() {
			r.T.Errorf("journal entry %s is open (%s)", e.LaunchID, e.State)
		}
	}
}

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

func runCmd(cmd *exec.Cmd) result {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String(), took: time.Since(t0)}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		res.code = -1
		res.stderr += err.Error()
	}
	return res
}

func TestSupervisorExitStatus(t *testing.T) {
	forEngine(t, func(t *testing.T, r *rig) {
		for _, tc := range []struct {
			name string
			args []string
			code int
			out  string
		}{
			{"0", []string{"--", "sh", "-c", "echo hello; echo oops >&2"}, 0, "hello\n"},
			{"7", []string{"--", "sh", "-c", "exit 7"}, 7, ""},
			{"128+USR1", []string{"--", "sh", "-c", "kill -USR1 $$"}, 128 + int(syscall.SIGUSR1), ""},
			{"deadline", []string{"--deadline", "500ms", "--grace", "200ms", "--", "sh", "-c", "trap '' TERM; sleep 30"}, shared.ExitDeadline, ""},
			{"not found", []string{"--", "/nonexistent"}, shared.ExitNotFound, ""},
			{"cannot exec", []string{"--", "/etc/passwd"}, shared.ExitCannotExec, ""},
			{"watcher in image", []string{"--watcher-in-image", ktest.ImageWatcher, "--", "sh", "-c", "exit 3"}, 3, ""},
		} {
			res := runCmd(r.supervisor(nil, tc.args...))
			t.Logf("%s: exit %d in %v", tc.name, res.code, res.took.Round(time.Millisecond))
			if res.code != tc.code || res.stdout != tc.out {
				t.Errorf("%s: exit %d stdout %q, want %d %q; stderr:\n%s", tc.name, res.code, res.stdout, tc.code, tc.out, res.stderr)
			}
			if tc.name == "0" && !strings.Contains(res.stderr, "oops") {
				t.Errorf("agent stderr not relayed: %q", res.stderr)
			}
		}
		r.assertClean()
		es := r.entries(r.Instance)
		if len(es) != 7 {
			t.Fatalf("%d journal entries, want 7", len(es))
		}
		for _, e := range es {
			if e.State != journal.StateRemoved || e.Exit == nil {
				t.Errorf("journal entry %+v", e)
			}
		}
	})
}

// agentPids returns the host pids whose command line holds token.
func agentPids(token string) []int {
	var pids []int
	ms, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err != nil || !bytes.Contains(b, []byte(token)) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(m)))
		pids = append(pids, pid)
	}
	return pids
}

// allDead reports whether every pid is gone or a zombie.
func allDead(pids []int) bool {
	for _, p := range pids {
		if st, err := ktest.ReadStat(p); err == nil && st.State != 'Z' {
			return false
		}
	}
	return true
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	i := int(float64(len(s)-1)*p + 0.5)
	return s[i]
}

// SIGKILL of the supervisor mid-run: the agent tree (a setsid'd and a
// TERM-ignoring descendant included) dies and the box is removed by the
// engine's auto-remove; the journal entry stays open for reconcile.
func TestSupervisorSIGKILL(t *testing.T) {
	const trials = 10
	forEngine(t, func(t *testing.T, r *rig) {
		var dead, removed []time.Duration
		for i := 0; i < trials; i++ {
			token := fmt.Sprintf("%d%03d", 700000+os.Getpid()%1000, i)
			agent := fmt.Sprintf("setsid sleep %s & (trap '' TERM; sleep %s) & sleep %s", token, token, token)
			os.Remove(r.eventsFile())
			cmd := r.supervisor(nil, "--", "sh", "-c", agent)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			box := r.waitEvent(supervisor.EventReady, 30*time.Second).Box
			var pids []int
			for t0 := time.Now(); len(pids) < 3; pids = agentPids(token) {
				if time.Since(t0) > 10*time.Second {
					t.Fatalf("trial %d: agent processes %v, want 3", i, pids)
				}
				time.Sleep(time.Millisecond)
			}
			// Two watchers: the agent's pids (dead = gone or zombie) polled
			// tightly, the box polled through the engine CLI.
			t0 := time.Now()
			deadc, removedc := make(chan time.Duration, 1), make(chan time.Duration, 1)
			go func() {
				for !allDead(pids) {
					if time.Since(t0) > 30*time.Second {
						deadc <- -1
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
				deadc <- time.Since(t0)
			}()
			go func() {
				for r.exists(box) {
					if time.Since(t0) > 30*time.Second {
						removedc <- -1
						return
					}
				}
				removedc <- time.Since(t0)
			}()
			cmd.Process.Kill()
			tDead, tRemoved := <-deadc, <-removedc
			if tDead < 0 || tRemoved < 0 {
				t.Fatalf("trial %d: after 30s agent pids %v, box exists %v", i, agentPids(token), r.exists(box))
			}
			cmd.Wait()
			t.Logf("trial %d: SIGKILL → agent processes dead %v, box removed %v", i, tDead.Round(10*time.Microsecond), tRemoved.Round(time.Millisecond))
			dead, removed = append(dead, tDead), append(removed, tRemoved)
		}
		t.Logf("%s SIGKILL → agent dead:  p50 %v p95 %v max %v (n=%d)", r.Name, percentile(dead, .5).Round(10*time.Microsecond), percentile(dead, .95).Round(10*time.Microsecond), percentile(dead, 1).Round(10*time.Microsecond), trials)
		t.Logf("%s SIGKILL → box removed: p50 %v p95 %v max %v (n=%d; polled with `%s container inspect`)", r.Name, percentile(removed, .5).Round(time.Millisecond), percentile(removed, .95).Round(time.Millisecond), percentile(removed, 1).Round(time.Millisecond), trials, r.Runtime)
		if b := r.boxes(r.Instance); len(b) != 0 {
			t.Errorf("boxes left: %v", b)
		}
		// The supervisor never got to journal the removal: reconcile's job.
		for _, e := range r.entries(r.Instance) {
			if e.State != journal.StateStarted || e.Owner.Alive() {
				t.Errorf("journal entry %s: state %s, owner alive %v", e.LaunchID, e.State, e.Owner.Alive())
			}
		}
		// ls shows them so: journal open, owner gone, box absent.
		out, err := r.Command(nil, r.Bin.Supervisor, "--instance", r.Instance, "--journal", r.JournalDir(), "ls", "--json").Output()
		if err != nil {
			t.Fatalf("supervisor ls: %v", err)
		}
		var rows []cli.LsRow
		if err := json.Unmarshal(out, &rows); err != nil {
			t.Fatalf("ls --json: %v: %s", err, out)
		}
		if len(rows) != trials {
			t.Errorf("ls: %d rows, want %d: %s", len(rows), trials, out)
		}
		for _, row := range rows {
			if row.Journal != journal.StateStarted || row.Owner != "gone" || row.BoxState != "absent" || row.Runtime != r.Runtime {
				t.Errorf("ls row %+v", row)
			}
		}
		// Reconcile closes them, and removes what the killed supervisors
		// left on the host (docker: their live FIFOs' folders).
		if code, rep, stderr := r.reconcile(r.Instance); code != 0 || len(rep.Closed) != trials {
			t.Errorf("reconcile: exit %d, %d closed (want %d): %s", code, len(rep.Closed), trials, stderr)
		}
		for _, row := range rows {
			if _, err := os.Lstat(filepath.Join(r.liveRoot(), row.Box)); err == nil {
				t.Errorf("box %s: its live FIFO folder is left after reconcile", row.Box)
			}
		}
	})
}

func TestSupervisorSignals(t *testing.T) {
	forEngine(t, func(t *testing.T, r *rig) {
		for _, tc := range []struct {
			name    string
			signals []syscall.Signal
			agent   string
			code    int
		}{
			// First signal: stop (TERM, grace, KILL) — sleep dies of TERM.
			{"SIGINT", []syscall.Signal{syscall.SIGINT}, "sleep 1000", 128 + int(syscall.SIGTERM)},
			{"SIGTERM", []syscall.Signal{syscall.SIGTERM}, "sleep 1000", 128 + int(syscall.SIGTERM)},
			// Second signal: at once, even for an agent that ignores TERM.
			{"SIGTERM twice", []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM}, "trap '' TERM; sleep 1000 & wait", 128 + int(syscall.SIGTERM)},
		} {
			os.Remove(r.eventsFile())
			cmd := r.supervisor(nil, "--grace", "20s", "--", "sh", "-c", tc.agent)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			box := r.waitEvent(supervisor.EventReady, 30*time.Second).Box
			t0 := time.Now()
			for _, s := range tc.signals {
				cmd.Process.Signal(s)
				time.Sleep(50 * time.Millisecond)
			}
			err := cmd.Wait()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			t.Logf("%s: exit %d, %v after the first signal", tc.name, code, time.Since(t0).Round(time.Millisecond))
			if code != tc.code {
				t.Errorf("%s: exit %d, want %d; stderr %s", tc.name, code, tc.code, errb.String())
			}
			if time.Since(t0) > 15*time.Second {
				t.Errorf("%s: took %v (grace is 20s: the second signal must not wait for it)", tc.name, time.Since(t0))
			}
			if r.exists(box) {
				t.Errorf("%s: box %s exists", tc.name, box)
			}
			evs := r.events()
			if evs[len(evs)-1].Event != supervisor.EventRemoved || evs[len(evs)-1].Error != "" {
				t.Errorf("%s: last event %+v", tc.name, evs[len(evs)-1])
			}
		}
		r.assertClean()
	})
}

// A secret passed with --env reaches the agent's environment and
// nothing else on the host or in the engine.
func TestSupervisorSecrets(t *testing.T) {
	forEngine(t, func(t *testing.T, r *rig) {
		secret := fmt.Sprintf("dw-secret-%x", time.Now().UnixNano())
		cmd := r.supervisor([]string{"DW_SECRET=" + secret}, "--env", "DW_SECRET", "--", "sh", "-c", `echo "$DW_SECRET"; sleep 1000`)
		var out, errb syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		box := r.waitEvent(supervisor.EventReady, 30*time.Second).Box
		for t0 := time.Now(); !strings.Contains(out.String(), secret); time.Sleep(5 * time.Millisecond) {
			if time.Since(t0) > 20*time.Second {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the agent did not print the secret; stdout %q stderr %q", out.String(), errb.String())
			}
		}
		sup := cmd.Process.Pid
		// Host argv and environments (the supervisor's own environment
		// holds it: that is where it came from).
		ms, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, m := range ms {
			if b, _ := os.ReadFile(m); bytes.Contains(b, []byte(secret)) {
				t.Errorf("secret in %s: %q", m, b)
			}
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(m)))
			if pid == sup || pid == os.Getpid() {
				continue
			}
			if b, _ := os.ReadFile(filepath.Join(filepath.Dir(m), "environ")); bytes.Contains(b, []byte(secret)) {
				agent, _ := os.ReadFile(m)
				if strings.HasPrefix(string(agent), "sh\x00-c\x00echo") || strings.HasPrefix(string(agent), "sleep\x001000") {
					continue // the agent itself
				}
				t.Errorf("secret in the environment of pid %d (%q)", pid, agent)
			}
		}
		// The engine's view of the box.
		insp, err := r.Engine("container", "inspect", box).Output()
		if err != nil {
			t.Fatalf("inspect: %v", err)
		}
		if bytes.Contains(insp, []byte(secret)) {
			t.Errorf("secret in %s inspect", r.Name)
		}
		// The watcher's own environment (PID 1 of the box), from the host.
		pidOut, err := r.Engine("container", "inspect", "--format", "{{.State.Pid}}", box).Output()
		if err != nil {
			t.Fatal(err)
		}
		wenv, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pidOut)) + "/environ")
		if err != nil {
			t.Fatalf("watcher environ: %v", err)
		}
		if bytes.Contains(wenv, []byte(secret)) {
			t.Errorf("secret in the watcher's environment")
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		for _, f := range []string{r.eventsFile()} {
			if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(secret)) {
				t.Errorf("secret in %s", f)
			}
		}
		filepath.Walk(r.JournalDir(), func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
					t.Errorf("secret in journal file %s", p)
				}
			}
			return nil
		})
		if strings.Contains(errb.String(), secret) {
			t.Errorf("secret on the supervisor's stderr")
		}
		r.assertClean()
	})
}

// Failures before anything exists: one clear line, a distinct exit
// status, no box, no journal entry (local podman's missing image: a
// closed one).
func TestSupervisorRefusals(t *testing.T) {
	forEngine(t, func(t *testing.T, r *rig) {
		emptyPath, _ := os.MkdirTemp("", "dw-nopath-")
		defer os.RemoveAll(emptyPath)
		os.Chmod(emptyPath, 0o755)
		type tc struct {
			name string
			env  []string
			args []string
			code int
			want string
		}
		// Missing engine: no CLI on PATH and (docker) no API to reach
		// instead; with the API at hand docker needs no CLI at all.
		missing := []string{"PATH=" + emptyPath}
		if r.Runtime == "docker" {
			missing = append(missing, "DOCKER_HOST=unix:///tmp/dw-no-dockerd.sock")
		}
		cases := []tc{
			{"missing engine", missing, []string{"--", "true"}, shared.ExitEngine, "not installed"},
			{"missing image", nil, []string{"--image", "deathwatch-test:no-such-image", "--", "true"}, shared.ExitImage, "not found"},
			{"bad flag", nil, []string{"--no-such-flag", "--", "true"}, shared.ExitUsage, "unknown flag"},
			{"agent uid 0", nil, []string{"--user", "0:0", "--", "true"}, shared.ExitRefused, "root"},
		}
		switch r.Name {
		case "docker", "docker-rootless":
			// A stopped dockerd: point the client at a socket nobody serves.
			cases = append(cases, tc{"dockerd down", []string{"DOCKER_HOST=unix:///tmp/dw-no-dockerd.sock"}, []string{"--", "true"}, shared.ExitEngine, "not reachable"})
		case "podman-rootless":
			// Rootless (Podman or Docker) needs no --allow-rootful; the rootful engines without it are refused.
		}
		if r.User == "" {
			cases = append(cases, tc{"rootful without --allow-rootful", nil, nil, shared.ExitRefused, "--allow-rootful"})
		}
		for _, c := range cases {
			var cmd *exec.Cmd
			if c.name == "rootful without --allow-rootful" {
				cmd = r.Command(nil, r.Bin.Supervisor, "--instance", r.Instance, "--journal", r.JournalDir(), "exec", "--runtime", r.Runtime, "--image", r.Image, "--", "true")
			} else {
				cmd = r.supervisor(c.env, c.args...)
				if c.name == "missing engine" {
					// PATH without the engine, but the supervisor found by absolute path.
					cmd.Env = append(cmd.Env, "PATH="+emptyPath)
				}
			}
			res := runCmd(cmd)
			lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
			// A rootful engine whose boxes share the host's ids says so
			// first, in one line of its own (TestDockerRootfulStatement).
			if len(lines) > 1 && strings.HasPrefix(lines[0], "supervisor: warning: rootful") {
				lines = lines[1:]
			}
			t.Logf("%s: exit %d: %s", c.name, res.code, strings.TrimSpace(res.stderr))
			if res.code != c.code || len(lines) != 1 || !strings.Contains(lines[0], c.want) {
				t.Errorf("%s: exit %d stderr %q, want %d and one line with %q", c.name, res.code, res.stderr, c.code, c.want)
			}
		}
		r.assertClean()
		// Nothing journaled, but where one engine client creates the box
		// and finds a missing image (local podman's `podman run`): its
		// intent came first, and is closed with the image's status.
		for _, e := range r.entries(r.Instance) {
			if !r.oneStep() || e.State != journal.StateRemoved || e.Exit == nil || e.Exit.Code != shared.ExitImage {
				t.Errorf("journal entry written: %+v", e)
			}
		}
	})
}

// Launch overhead: supervisor exec vs a bare `run --rm -i IMAGE true`.
// Printed, not asserted (make bench has the side-by-side with hyperfine).
func TestSupervisorLaunchTime(t *testing.T) {
	const n = 10
	forEngine(t, func(t *testing.T, r *rig) {
		var sup, bare []time.Duration
		for i := 0; i < n; i++ {
			res := runCmd(r.supervisor(nil, "--", "true"))
			if res.code != 0 {
				t.Fatalf("supervisor exec: %d %s", res.code, res.stderr)
			}
			sup = append(sup, res.took)
			res = runCmd(r.Engine("run", "--rm", "-i", "--network", "none", r.Image, "true"))
			if res.code != 0 {
				t.Fatalf("bare run: %d %s", res.code, res.stderr)
			}
			bare = append(bare, res.took)
		}
		ps, pb := percentile(sup, .5), percentile(bare, .5)
		t.Logf("%s launch p50: supervisor exec -- true %v, %s run --rm -i IMAGE true %v, ratio %.2f (n=%d)", r.Name, ps.Round(time.Millisecond), r.Runtime, pb.Round(time.Millisecond), float64(ps)/float64(pb), n)
		r.assertClean()
	})
}

// What the box is made of: the bind mount read-only, the workdir, no
// network but lo, no capabilities for the agent, and the limits — or,
// where the engine would silently ignore limits (rootless on cgroup v1),
// a refusal.
func TestSupervisorBoxSettings(t *testing.T) {
	forEngine(t, func(t *testing.T, r *rig) {
		src, err := os.MkdirTemp("", "dw-kt-mount-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(src)
		os.Chmod(src, 0o755)
		os.WriteFile(filepath.Join(src, "f"), []byte("from-host\n"), 0o644)
		agent := `pwd; cat f; (touch x 2>/dev/null && echo writable) || echo readonly; ls /sys/class/net; grep CapEff /proc/self/status; id -u`
		args := []string{"--mount", src + ":/data:ro", "--workdir", "/data", "--network", "none"}
		limits := []string{"--memory", "64m", "--pids-limit", "50"}
		_, v2 := os.Stat("/sys/fs/cgroup/cgroup.controllers")
		if r.User != "" && v2 != nil {
			res := runCmd(r.supervisor(nil, append(append(slices.Clone(args), limits...), "--", "true")...))
			t.Logf("limits on rootless cgroup v1: exit %d: %s", res.code, strings.TrimSpace(res.stderr))
			// Podman's refusal is judged by the cgroup version, docker's
			// by its daemon's /info.
			why := map[string]string{"podman": "cgroup v1", "docker": "its /info: MemoryLimit false"}[r.Runtime]
			if res.code != shared.ExitRefused || !strings.Contains(res.stderr, why) {
				t.Errorf("limits on rootless cgroup v1: exit %d, stderr %q; want a refusal", res.code, res.stderr)
			}
		} else {
			args = append(args, limits...)
			if v2 != nil {
				agent += "; cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/memory/memory.limit_in_bytes"
			} else {
				agent += "; cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/memory.max"
			}
		}
		res := runCmd(r.supervisor(nil, append(args, "--", "sh", "-c", agent)...))
		uid := "1000"
		if ls := strings.Split(res.stdout, "\n"); len(ls) > 5 {
			// Rootful docker without userns-remap runs the box on the
			// host's ids: the agent has an id of the box's own, above
			// 2^31. Rootless docker runs every box in its daemon's
			// namespace: the agent has an id of the box's own there,
			// from 32768 up.
			u, _ := strconv.ParseUint(ls[5], 10, 32)
			if r.Name == "docker" && u >= idslot.Base || r.Name == "docker-rootless" && u >= 1<<15 && u < 65533 {
				uid = ls[5]
			}
		}
		want := "/data\nfrom-host\nreadonly\nlo\nCapEff:\t0000000000000000\n" + uid + "\n"
		if slices.Contains(args, "--memory") {
			want += "50\n67108864\n"
		}
		if res.code != 0 || res.stdout != want {
			t.Errorf("exit %d stdout %q, want %q; stderr %s", res.code, res.stdout, want, res.stderr)
		}
		r.assertClean()
	})
}

// The engine's attach carries binary frames: 4 MiB of random bytes
// from the agent come out of the supervisor's stdout byte for byte.
func TestSupervisorBinaryOutput(t *testing.T) {
	forEngine(t, func(t *testing.T, r *rig) {
		agent := `head -c 4194304 /dev/urandom > /tmp/o; sha256sum < /tmp/o >&2; cat /tmp/o`
		res := runCmd(r.supervisor(nil, "--", "sh", "-c", agent))
		if res.code != 0 {
			t.Fatalf("exit %d: %s", res.code, res.stderr)
		}
		sum := sha256Hex([]byte(res.stdout))
		if len(res.stdout) != 4<<20 || !strings.Contains(res.stderr, sum) {
			t.Errorf("stdout: %d bytes, sha256 %s; the agent reported %q", len(res.stdout), sum, res.stderr)
		}
		t.Logf("4 MiB relayed in %v", res.took.Round(time.Millisecond))
		r.assertClean()
	})
}

// A frozen supervisor (SIGSTOP) stops sending pings: with --heartbeat the
// watcher kills the box within the heartbeat, and auto-remove removes it.
func TestSupervisorHeartbeat(t *testing.T) {
	forEngine(t, func(t *testing.T, r *rig) {
		const hb = 600 * time.Millisecond
		token := fmt.Sprintf("%d", 800000+os.Getpid()%100000)
		cmd := r.supervisor(nil, "--heartbeat", hb.String(), "--", "sh", "-c", "sleep "+token)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			cmd.Process.Kill()
			cmd.Wait()
		}()
		box := r.waitEvent(supervisor.EventReady, 30*time.Second).Box
		var pids []int
		for t0 := time.Now(); len(pids) == 0; pids = agentPids("sleep\x00" + token) {
			if time.Since(t0) > 10*time.Second {
				t.Fatal("agent not seen")
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(2 * hb) // pings keep it alive meanwhile
		if allDead(pids) {
			t.Fatalf("agent died while the supervisor was pinging")
		}
		cmd.Process.Signal(syscall.SIGSTOP)
		t0 := time.Now()
		for !allDead(pids) {
			if time.Since(t0) > 10*hb {
				t.Fatalf("agent alive %v after SIGSTOP (heartbeat %v)", time.Since(t0), hb)
			}
			time.Sleep(time.Millisecond)
		}
		dead := time.Since(t0)
		for r.exists(box) {
			if time.Since(t0) > 30*time.Second {
				t.Fatalf("box %s not removed", box)
			}
		}
		t.Logf("SIGSTOP → agent dead %v (heartbeat %v), box removed %v", dead.Round(time.Millisecond), hb, time.Since(t0).Round(time.Millisecond))
	})
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// SIGUSR1 to the supervisor reaches the agent (a signal frame) and
// stops nothing.
func TestSupervisorForwardsUSR1(t *testing.T) {
	forEngine(t, func(t *testing.T, r *rig) {
		cmd := r.supervisor(nil, "--", "sh", "-c", "trap 'echo got-usr1' USR1; echo armed; while :; do sleep 0.05; done")
		var out syncBuffer
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		defer cmd.Process.Kill()
		r.waitEvent(supervisor.EventReady, 30*time.Second)
		for t0 := time.Now(); !strings.Contains(out.String(), "armed"); time.Sleep(2 * time.Millisecond) {
			if time.Since(t0) > 10*time.Second {
				t.Fatalf("agent not armed: %q", out.String())
			}
		}
		cmd.Process.Signal(syscall.SIGUSR1)
		for t0 := time.Now(); !strings.Contains(out.String(), "got-usr1"); time.Sleep(2 * time.Millisecond) {
			if time.Since(t0) > 10*time.Second {
				t.Fatalf("agent did not get SIGUSR1: %q", out.String())
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 143 {
			t.Errorf("exit after SIGTERM: %v", err)
		}
		r.assertClean()
	})
}

// syncBuffer is a bytes.Buffer the exec copier and the test can share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
