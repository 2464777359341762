package kerneltests

// The watcher's restricted mode (--restricted) outside Kubernetes: run
// as PID 1 at the agent's uid with no capability, as a restricted pod's
// container runs it, it starts the agent at that uid behind its walls,
// and restrictedprobe's attacks on PID 1 are each refused; run as root
// it refuses the box (243) in one line, as it does on a kernel without
// Landlock's signal scope (ABI 6).

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/shared/landlock"
	"deathwatch/shared/seccomp"
)

// restrictedAttacks are restrictedprobe's attacks on PID 1 that its
// walls refuse in restricted mode.
var restrictedAttacks = []string{
	"kill(1, SIGTERM)", "kill(1, SIGKILL)", "kill(1, SIGSTOP)",
	"prlimit(1, RLIMIT_CPU, 1s)", "prlimit(1, RLIMIT_NOFILE, 3)", "setpriority(PRIO_PROCESS, 1, 19)", "sched_setaffinity(1)",
	"ptrace(PTRACE_ATTACH, 1)", "ptrace(PTRACE_SEIZE, 1)", "process_vm_readv(1)", "process_vm_writev(1)",
	"open /proc/1/environ", "open /proc/1/mem", "open /proc/1/maps", "open /proc/1/fd/0", "open /proc/1/fd/1",
	"readdir /proc/1/fd", "open /proc/1/fd/4 for write", "open /proc/1/cwd/.", "open /proc/1/root/.",
	"open /proc/1/oom_score_adj for write", "pidfd_getfd(1, 0)", "pidfd_getfd(1, 1)", "unshare(CLONE_NEWUSER) by the attacker",
}

// unrefused are the attacks of restrictedAttacks that out does not
// show refused.
func unrefused(out string) []string {
	var left []string
	for _, a := range restrictedAttacks {
		if !regexp.MustCompile(`(?m)^ATTACK ` + regexp.QuoteMeta(a) + ` +refused: `).MatchString(out) {
			left = append(left, a)
		}
	}
	return left
}

func TestWatcherRestricted(t *testing.T) {
	bin := watcherBin(t)
	ktest.RequireCmd(t, "setpriv")
	// The probe where uid 1000 can run it.
	dir, err := os.MkdirTemp("", "dw-restricted-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	probe, err := os.ReadFile(ktest.ToolPath(t, "restrictedprobe"))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "probe"), probe, 0o755)
	}
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	spec := shared.Spec{Argv: []string{filepath.Join(dir, "probe"), "attack"}, Env: []string{agentPath},
		UID: shared.DefaultAgentUID, GID: shared.DefaultAgentGID, Grace: time.Second, Seccomp: seccomp.Default(false)}

	t.Run("as root, refused", func(t *testing.T) {
		c := ktest.StartController(t, bin, pid1FD.options(false, "--restricted"))
		expectRestrictedRefusal(t, c, spec, "the watcher runs as root")
	})

	t.Run("as the agent's uid, walled", func(t *testing.T) {
		// PID 1 at 1000:1000 with no capability and no_new_privs, as in a
		// restricted pod: unshare (root) mounts /proc, setpriv drops.
		as := filepath.Join(dir, "as-agent")
		script := "#!/bin/sh\nexec setpriv --reuid=1000 --regid=1000 --clear-groups --inh-caps=-all --ambient-caps=-all --bounding-set=-all --no-new-privs " + bin + " \"$@\"\n"
		if err := os.WriteFile(as, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		c := ktest.StartController(t, as, pid1FD.options(false, "--restricted"))
		if abi, err := landlock.ABI(); err != nil || abi < landlock.ScopeABI {
			// A kernel without the signal scope (the VM rig's 6.1
			// guests): restricted mode cannot wall the agent in, so the
			// watcher refuses before the agent exists, in one line that
			// names the kernel's lack.
			expectRestrictedRefusal(t, c, spec, "Landlock")
			return
		}
		c.Launch(spec)
		res := c.Wait(12 * ktest.Slack)
		out := c.Stdout()
		t.Logf("agent:\n%s\nwatcher:\n%s", out, c.WatcherOutput())
		expectExit(t, c, res, 0, shared.ReasonExited, true)
		if !strings.Contains(out, "attacker pid=") || !strings.Contains(out, "uid=1000") {
			t.Fatalf("the probe did not run as uid 1000:\n%s", out)
		}
		if left := unrefused(out); len(left) > 0 {
			t.Errorf("not refused: %s", strings.Join(left, "; "))
		}
	})
}

// expectRestrictedRefusal sends the spec to the --restricted watcher c
// and requires its refusal (243) before the agent ran, in one line that
// names --restricted and why.
func expectRestrictedRefusal(t *testing.T, c *ktest.Controller, spec shared.Spec, why string) {
	t.Helper()
	if err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(shared.FrameSpec, spec.Marshal()); err != nil {
		t.Fatal(err)
	}
	res := c.Wait(6 * ktest.Slack)
	expectExit(t, c, res, shared.ExitRefused, shared.ReasonSetupFailed, true)
	if res.Exit == nil || !strings.HasPrefix(res.Exit.Message, "--restricted") || !strings.Contains(res.Exit.Message, why) || strings.Contains(res.Exit.Message, "\n") {
		t.Errorf("refusal %s: want one line naming --restricted and %q", fmtExit(res.Exit), why)
	}
	if strings.Contains(c.Stdout(), "attacker pid=") {
		t.Error("the agent ran")
	}
}
