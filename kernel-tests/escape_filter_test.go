package kerneltests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/shared/seccomp"
)

// The escape suite plays the attacker from inside a box, as the agent
// (uid 1000, no capabilities), through the real watcher in control
// mode, and asserts what the attacker gets. The prober is the escape
// program (kernel-tests/ktest/escape); the spec carries the filter the
// supervisor sends (seccomp.Default).

// escapeSpec runs script with busybox sh as the agent; $E is the prober.
func escapeSpec(t *testing.T, script, marker string, allowUserns bool) shared.Spec {
	s := shellSpec(script, marker)
	s.Env = append(s.Env, "E="+ktest.ToolPath(t, "escape"))
	s.AllowUserns = allowUserns
	s.Seccomp = seccomp.Default(allowUserns)
	return s
}

// watcherProc is the watcher process under the controller (the child of
// unshare when it runs as PID 1).
func watcherProc(t *testing.T, c *ktest.Controller, bin string) int {
	t.Helper()
	if c.Watcher.Path == bin {
		return c.Watcher.Process.Pid
	}
	for _, p := range ktest.Descendants(c.Watcher.Process.Pid) {
		if cl := ktest.Cmdline(p.PID); len(cl) > 0 && cl[0] == bin {
			return p.PID
		}
	}
	t.Fatalf("no watcher process below %d\n%s", c.Watcher.Process.Pid, c.Diagnostics())
	return 0
}

func statusOf(t *testing.T, pid int, field string) string {
	t.Helper()
	v, err := ktest.StatusField(pid, field)
	if err != nil {
		t.Fatalf("/proc/%d/status %s: %v", pid, field, err)
	}
	return strings.TrimSpace(v)
}

// TestEscapeSyscallFilter: the agent's kernel surface. Without the flag
// every call a local-root exploit needs is denied, new user namespaces
// too; with AllowUserns a nested user namespace works. The agent shows
// Seccomp: 2 in /proc, the watcher 0; the agent runs at oom_score_adj
// 1000, the watcher at its own.
func TestEscapeSyscallFilter(t *testing.T) {
	bin := watcherBin(t)
	ktest.RequireCmd(t, "unshare")
	for _, userns := range []bool{false, true} {
		for _, d := range twoDomains {
			t.Run(d.name+"/userns="+strconv.FormatBool(userns), func(t *testing.T) {
				marker := newMarker(t)
				c := ktest.StartController(t, bin, d.options(false))
				script := `"$E" calls; "$E" oom-score
if unshare --user --map-root-user true 2>/dev/null; then echo unshare-Ur=ok; else echo unshare-Ur=denied; fi
echo done=1; sleep 60`
				c.Launch(escapeSpec(t, script, marker, userns))
				if !c.WaitStdout("done=1", 20*time.Second) {
					t.Fatalf("the agent did not finish its probes\n%s", c.Diagnostics())
				}
				got := keyValues(c.Stdout())
				t.Logf("agent: %v", got)
				want := map[string]string{
					"seccomp": "2", "keyctl": "EPERM", "add_key": "EPERM", "bpf": "EPERM",
					"perf_event_open": "EPERM", "io_uring_setup": "EPERM", "userfaultfd": "EPERM",
					"mount": "EPERM", "fsopen": "EPERM", "personality-query": "ok",
					"clone3": "ENOSYS", "clone-newuser": "EPERM", "unshare-Ur": "denied",
					"oom_score_adj": "1000",
				}
				if userns {
					want["clone3"] = "EINVAL" // reaches the kernel, which refuses a size of 0
					want["clone-newuser"], want["unshare-Ur"] = "ok", "ok"
					delete(want, "mount") // the kernel's own EPERM: no capability here
					delete(want, "fsopen")
				}
				for k, v := range want {
					if got[k] != v {
						t.Errorf("%s=%q, want %q", k, got[k], v)
					}
				}
				w := watcherProc(t, c, bin)
				agents := ktest.Descendants(w)
				if len(agents) == 0 {
					t.Fatalf("no agent process below the watcher %d", w)
				}
				// Below a watcher that made its own PID namespace runs the
				// inner watcher (PID 1 there), then the agent.
				for _, p := range append(agents, ktest.Proc{PID: w}) {
					cl := ktest.Cmdline(p.PID)
					want := "2"
					if len(cl) > 0 && (cl[0] == bin || cl[0] == "watcher") {
						want = "0" // the filter is the agent's only
						if b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/oom_score_adj"); err != nil || strings.TrimSpace(string(b)) == "1000" {
							t.Errorf("watcher %d oom_score_adj %q (%v): want the watcher's own, not the agent's 1000", p.PID, b, err)
						}
					}
					if s := statusOf(t, p.PID, "Seccomp"); s != want {
						t.Errorf("process %d %v: Seccomp: %s, want %s", p.PID, cl, s, want)
					}
				}
				if err := c.Send(shared.FrameStop, shared.Stop{}.Marshal()); err != nil {
					t.Fatal(err)
				}
				res := c.Wait(20 * time.Second)
				expectExit(t, c, res, shared.ExitSignalBase+int(syscall.SIGKILL), shared.ReasonStopped, true)
			})
		}
	}
}

// TestEscapeForeignArch: a call through another ABI (x32 on x86_64)
// kills the agent (SIGSYS) rather than reaching a table the filter does
// not check.
func TestEscapeForeignArch(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Fatalf("no foreign-ABI probe for %s", runtime.GOARCH)
	}
	bin := watcherBin(t)
	c := ktest.StartController(t, bin, pid1FD.options(false))
	c.Launch(escapeSpec(t, `exec "$E" x32`, newMarker(t), false))
	res := c.Wait(20 * time.Second)
	expectExit(t, c, res, shared.ExitSignalBase+int(syscall.SIGSYS), shared.ReasonSignaled, true)
	if strings.Contains(c.Stdout(), "x32=") {
		t.Errorf("the x32 call returned: %q", c.Stdout())
	}
}

// TestEscapeSupervisorSendsFilter: `supervisor exec --runtime native`
// puts the filter in every spec (the hook where exec builds it): the
// agent of a plain exec sees Seccomp 2 and is denied keyctl and a new
// user namespace.
func TestEscapeSupervisorSendsFilter(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	dir := filepath.Dir(ktest.ToolPath(t, "escape"))
	journal := sharedTempDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.Supervisor, "exec", "--runtime", "native", "--journal", journal,
		"--watcher", bins.Watcher, "--mount", dir+":/srv:ro", "--", "/srv/escape", "calls")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("supervisor exec: %v\n%s", err, out)
	}
	got := keyValues(string(out))
	t.Logf("agent: %v", got)
	for k, v := range map[string]string{"seccomp": "2", "keyctl": "EPERM", "io_uring_setup": "EPERM", "clone-newuser": "EPERM", "clone3": "ENOSYS"} {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
}
