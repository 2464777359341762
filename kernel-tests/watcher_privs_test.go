package kerneltests

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// privScript prints what the agent sees, in sections, then waits for the
// test (file $2/go) so that the test can inspect it from outside:
//   - fds: `ls -l /proc/self/fd` (ls's own, inherited from the agent);
//   - init: /proc/1/status, the watcher as the box sees it;
//   - probe: the standin probe ($1), trying to signal and ptrace PID 1
//     and to read its environ and fds.
const privScript = `
echo "==fds=="; busybox ls -l /proc/self/fd
echo "==init=="; busybox cat /proc/1/status 2>&1
echo "==probe=="; "$1" probe
echo "==end=="
while [ ! -e "$2/go" ]; do busybox sleep 0.02; done
`

const secretValue = "dw-secret-7f3a91"

// sections splits the agent's output into its ==name== sections.
func sections(out string) map[string]string {
	m := map[string]string{}
	name := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "==") && strings.HasSuffix(line, "==") {
			name = strings.Trim(line, "=")
			continue
		}
		if name != "" {
			m[name] += line + "\n"
		}
	}
	return m
}

// lsFDs parses `ls -l /proc/self/fd`, leaving out the descriptor ls opened
// to read the folder: the highest one, shown without a target or as
// /proc/N/fd.
func lsFDs(out string) (map[int]string, error) {
	fds := map[int]string{}
	own, max := -1, -1
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "total") || line == "" {
			continue
		}
		name, target, _ := strings.Cut(line, " -> ")
		f := strings.Fields(name)
		if len(f) == 0 {
			return nil, fmt.Errorf("cannot parse %q", line)
		}
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			return nil, fmt.Errorf("cannot parse %q: %w", line, err)
		}
		if n > max {
			max = n
		}
		if target == "" || (strings.HasPrefix(target, "/proc/") && strings.HasSuffix(target, "/fd")) {
			if own >= 0 {
				return nil, fmt.Errorf("two descriptors look like ls's own: %d and %d", own, n)
			}
			own = n
		}
		fds[n] = target
	}
	if own >= 0 && own == max && own > 2 {
		delete(fds, own)
	}
	return fds, nil
}

func keyValues(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	return m
}

// TestWatcherAgentPrivileges: the agent runs as its uid/gid with no
// supplementary groups, no capabilities, no_new_privs and fds 0-2 only;
// the watcher runs as another uid; the agent cannot signal or ptrace PID
// 1 nor read its environ or fds; the spec's env reaches the agent only.
func TestWatcherAgentPrivileges(t *testing.T) {
	bin := watcherBin(t)
	probe := ktest.StandinPath(t)
	for _, d := range twoDomains {
		for _, id := range []uint32{1000, 1234} {
			t.Run(fmt.Sprintf("%s-uid%d", d.name, id), func(t *testing.T) {
				marker := newMarker(t)
				dir := readyDir(t)
				c := ktest.StartController(t, bin, d.options(false))
				spec := shellSpec(privScript, marker)
				spec.Argv = append(spec.Argv, probe, dir)
				spec.Env = append(spec.Env, "SECRET_TOKEN="+secretValue)
				spec.UID, spec.GID = id, id+1
				ready := c.Launch(spec)
				if !c.WaitStdout("==end==", 10*time.Second) {
					t.Fatalf("the agent did not finish its report\n%s", c.Diagnostics())
				}
				ns := c.BoxNamespace(5 * time.Second)
				checkAgentFromOutside(t, ns, ready.PID, spec, secretValue)
				checkAgentReport(t, c.Stdout(), d.pid1, spec)
				touch(t, dir+"/go")
				res := c.Wait(10 * time.Second)
				expectExit(t, c, res, 0, shared.ReasonExited, true)
				if strings.Contains(c.WatcherOutput(), secretValue) {
					t.Errorf("the watcher's own output holds the secret: %q", c.WatcherOutput())
				}
			})
		}
	}
}

// checkAgentFromOutside reads the agent's main process and the box's PID 1
// from the test's /proc.
func checkAgentFromOutside(t *testing.T, ns string, boxPID int, spec shared.Spec, secret string) {
	t.Helper()
	var agent ktest.Proc
	for _, p := range ktest.InNamespace(ns) {
		if n, err := ktest.NSPid(p.PID); err == nil && n[len(n)-1] == boxPID {
			agent = p
		}
	}
	if agent.PID == 0 {
		t.Fatalf("no process with pid %d (from ready) in the box", boxPID)
	}
	st, err := ktest.Status(agent.PID)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := strconv.Itoa(int(spec.UID)), strconv.Itoa(int(spec.GID))
	want := map[string]string{
		"Uid":        strings.Join([]string{uid, uid, uid, uid}, "\t"),
		"Gid":        strings.Join([]string{gid, gid, gid, gid}, "\t"),
		"Groups":     "",
		"CapInh":     "0000000000000000",
		"CapPrm":     "0000000000000000",
		"CapEff":     "0000000000000000",
		"CapBnd":     "0000000000000000",
		"CapAmb":     "0000000000000000",
		"NoNewPrivs": "1",
	}
	for k, v := range want {
		if st[k] != v {
			t.Errorf("agent (pid %d) %s: %q, want %q", agent.PID, k, st[k], v)
		}
	}
	fds, err := ktest.FDs(agent.PID)
	if err != nil {
		t.Fatal(err)
	}
	if len(fds) != 3 || fds[0] != "/dev/null" || fds[1] == "" || fds[2] == "" {
		t.Errorf("agent's open fds (from outside): %v, want exactly 0 (/dev/null), 1 and 2", fds)
	}
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", agent.PID)); secret != "" && (err != nil || !strings.Contains(string(env), "SECRET_TOKEN="+secret)) {
		t.Errorf("the spec's env did not reach the agent (%v): %q", err, env)
	}

	init, err := ktest.BoxInit(ns)
	if err != nil {
		t.Fatal(err)
	}
	// The watcher drops its own privileges just after it starts the
	// agent: give it a moment.
	var ist map[string]string
	ktest.WaitFor(ktest.Slack, func() bool {
		ist, err = ktest.Status(init.PID)
		return err == nil && !strings.HasPrefix(ist["Uid"], "0\t")
	})
	if err != nil {
		t.Fatal(err)
	}
	wuid := strings.Fields(ist["Uid"])
	if len(wuid) == 0 || wuid[0] == uid {
		t.Errorf("the watcher (box PID 1) runs as uid %q: the agent's uid %s", ist["Uid"], uid)
	}
	for _, u := range wuid {
		if u != strconv.Itoa(shared.DefaultWatcherUID) {
			t.Errorf("the watcher's Uid is %q, want %d (its default) in every field", ist["Uid"], shared.DefaultWatcherUID)
			break
		}
	}
	capEff, _ := strconv.ParseUint(ist["CapEff"], 16, 64)
	const capKill = 1 << 5
	if capEff&^capKill != 0 {
		t.Errorf("the watcher keeps CapEff %s, want at most CAP_KILL", ist["CapEff"])
	}
	t.Logf("watcher (box PID 1, host pid %d): Uid %q CapEff %s CapPrm %s CapBnd %s NoNewPrivs %s", init.PID, ist["Uid"], ist["CapEff"], ist["CapPrm"], ist["CapBnd"], ist["NoNewPrivs"])
	for _, f := range []string{"environ", "cmdline"} {
		if secret == "" {
			break
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", init.PID, f))
		if err != nil {
			t.Errorf("read the watcher's %s: %v", f, err)
		} else if strings.Contains(string(b), secret) {
			t.Errorf("the watcher's %s holds the agent's secret", f)
		}
	}
}

// checkAgentReport checks what the agent printed about itself and PID 1.
func checkAgentReport(t *testing.T, out string, pid1 bool, spec shared.Spec) {
	t.Helper()
	sec := sections(out)
	fds, err := lsFDs(sec["fds"])
	if err != nil {
		t.Errorf("agent's ls of /proc/self/fd: %v\n%s", err, sec["fds"])
	} else if len(fds) != 3 || fds[0] != "/dev/null" {
		t.Errorf("the agent has fds %v, want exactly 0 (/dev/null), 1 and 2\n%s", fds, sec["fds"])
	}
	p := keyValues(sec["probe"])
	t.Logf("agent's probe of PID 1: %v", p)
	for _, k := range []string{"kill0", "killkill", "killterm", "killhup", "killusr1", "killstop", "ptrace", "ptraceseize"} {
		if p[k] != "EPERM" {
			t.Errorf("agent → PID 1: %s = %q, want EPERM", k, p[k])
		}
	}
	if p["killcont"] != "EPERM" {
		// The kernel lets SIGCONT through within one session whatever the
		// uids; it has no effect on a running watcher (the run goes on to
		// exit 0, checked by the caller), but a separate session for the
		// agent would refuse it too.
		t.Logf("note: the agent's SIGCONT to PID 1 returned %s (same session: %s)", p["killcont"], p["sid"])
	}
	if p["pid"] != p["procself"] {
		t.Logf("note: the agent's /proc is not its PID namespace's (its pid %s, /proc/self → %s): /proc/1 is not the watcher, and the agent sees processes outside the box", p["pid"], p["procself"])
	}
	if !pid1 {
		// The box's /proc may be the host's here: /proc/1 is then not
		// the watcher, and what follows would prove nothing.
		return
	}
	init := ktest.ParseStatus(sec["init"])
	if u := strings.Fields(init["Uid"]); len(u) == 0 || u[0] == strconv.Itoa(int(spec.UID)) {
		t.Errorf("PID 1 as the agent sees it has Uid %q (the agent's uid is %d)\n%s", init["Uid"], spec.UID, sec["init"])
	}
	for _, k := range []string{"environ", "fds", "fd0", "mem"} {
		if p[k] != "EACCES" && p[k] != "EPERM" {
			t.Errorf("agent reads PID 1's %s: %q, want EACCES or EPERM", k, p[k])
		}
	}
}

// TestWatcherPlainUser: plain mode with --user runs the agent with the
// same restrictions as control mode; --user 0:0 is refused without
// --allow-root.
func TestWatcherPlainUser(t *testing.T) {
	bin := watcherBin(t)
	for _, pid1 := range []bool{true, false} {
		name := "ownns"
		if pid1 {
			name = "pid1"
		}
		t.Run(name, func(t *testing.T) {
			marker := newMarker(t)
			dir := readyDir(t)
			cmd := plainCmd(bin, pid1, []string{"--user", "1234:1235"}, bbox, "sh", "-c", `while [ ! -e "$1/go" ]; do busybox sleep 0.02; done; exit 5`, marker, dir)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() { killTree(cmd.Process.Pid) })
			var agent []ktest.Proc
			ok := ktest.WaitFor(5*time.Second, func() bool {
				agent = nil
				for _, p := range ktest.WithMarker(marker) {
					if a := ktest.Cmdline(p.PID); len(a) > 1 && a[0] == bbox {
						agent = append(agent, p)
					}
				}
				return len(agent) == 1
			})
			if !ok {
				t.Fatalf("no single agent process with marker %s: %s", marker, ktest.Describe(agent))
			}
			ns, err := ktest.PIDNamespace(agent[0].PID)
			if err != nil {
				t.Fatal(err)
			}
			n, err := ktest.NSPid(agent[0].PID)
			if err != nil {
				t.Fatal(err)
			}
			spec := shared.Spec{UID: 1234, GID: 1235}
			checkAgentFromOutside(t, ns, n[len(n)-1], spec, "")
			touch(t, dir+"/go")
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the watcher did not exit")
			}
			if code := cmd.ProcessState.ExitCode(); code != 5 {
				t.Errorf("exit status %d, want 5\n%s", code, out.String())
			}
		})
	}
	t.Run("root-refused", func(t *testing.T) {
		dir := readyDir(t)
		code, out, err := ktest.ExitStatus(plainCmd(bin, true, []string{"--user", "0:0"}, bbox, "touch", dir+"/agent-ran"), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("--user 0:0: exit %d, %q", code, out)
		if code != shared.ExitRefused && code != shared.ExitUsage {
			t.Errorf("exit status %d, want %d (refused) or %d (usage)", code, shared.ExitRefused, shared.ExitUsage)
		}
		if fileExists(dir + "/agent-ran") {
			t.Errorf("the agent ran as root without --allow-root")
		}
		code, out, err = ktest.ExitStatus(plainCmd(bin, true, []string{"--user", "0:0", "--allow-root"}, bbox, "touch", dir+"/agent-ran"), 10*time.Second)
		if err != nil || code != 0 || !fileExists(dir+"/agent-ran") {
			t.Errorf("--user 0:0 --allow-root: exit %d (%v), agent ran: %v; %q", code, err, fileExists(dir+"/agent-ran"), out)
		}
	})
}

// TestWatcherLsFDsParse checks the parser of the agent's fd listing.
func TestWatcherLsFDsParse(t *testing.T) {
	cases := []struct {
		out  string
		want map[int]string
		bad  bool
	}{
		{"total 0\nlr-x------ 1 1000 1001 64 Nov 30 05:20 0 -> /dev/null\nl-wx------ 1 1000 1001 64 Nov 30 05:20 1 -> pipe:[1]\nl-wx------ 1 1000 1001 64 Nov 30 05:20 2 -> pipe:[2]\nlr-x------ 1 1000 1001 64 Nov 30 05:20 3\n",
			map[int]string{0: "/dev/null", 1: "pipe:[1]", 2: "pipe:[2]"}, false},
		{"lr-x------ 1 u g 64 Nov 30 05:20 0 -> /dev/null\nlr-x------ 1 u g 64 Nov 30 05:20 3 -> /proc/77/fd\n",
			map[int]string{0: "/dev/null"}, false},
		// A leaked descriptor stays in the result, ls's own (the highest,
		// without a target) does not.
		{"lr-x------ 1 u g 64 Nov 30 05:20 0 -> /dev/null\nlrwx------ 1 u g 64 Nov 30 05:20 5 -> socket:[9]\nlr-x------ 1 u g 64 Nov 30 05:20 6\n",
			map[int]string{0: "/dev/null", 5: "socket:[9]"}, false},
		{"lr-x------ 1 u g 64 Nov 30 05:20 3\nlr-x------ 1 u g 64 Nov 30 05:20 4\n", nil, true},
		{"garbage\n", nil, true},
	}
	for i, c := range cases {
		got, err := lsFDs(c.out)
		if (err != nil) != c.bad {
			t.Errorf("case %d: err = %v, want error %v", i, err, c.bad)
			continue
		}
		if !c.bad && fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("case %d: got %v, want %v", i, got, c.want)
		}
	}
}
