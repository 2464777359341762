package kerneltests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// TestEscapeWatcherIdentityRefused: an agent with the watcher's own uid
// or gid could signal, ptrace or prlimit PID 1; the watcher refuses it
// (243) before anything starts, for the default watcher id and for one
// set with --watcher-user.
func TestEscapeWatcherIdentityRefused(t *testing.T) {
	bin := watcherBin(t)
	for _, c := range []struct {
		name     string
		flags    []string
		uid, gid uint32
	}{
		{"default uid", nil, shared.DefaultWatcherUID, shared.DefaultAgentGID},
		{"default gid", nil, shared.DefaultAgentUID, shared.DefaultWatcherGID},
		{"--watcher-user uid", []string{"--watcher-user=4000:4000"}, 4000, shared.DefaultAgentGID},
	} {
		t.Run(c.name, func(t *testing.T) {
			marker := newMarker(t)
			ctl := ktest.StartController(t, bin, pid1FD.options(false, c.flags...))
			spec := shellSpec("echo started-"+marker, marker)
			spec.UID, spec.GID = c.uid, c.gid
			if err := ctl.Hello(); err != nil {
				t.Fatal(err)
			}
			if err := ctl.Send(shared.FrameSpec, spec.Marshal()); err != nil {
				t.Fatal(err)
			}
			res := ctl.Wait(20 * time.Second)
			expectExit(t, ctl, res, shared.ExitRefused, shared.ReasonSetupFailed, true)
			if res.Exit != nil && !strings.Contains(res.Exit.Message, "watcher's own") {
				t.Errorf("exit message %q does not say why", res.Exit.Message)
			}
			if strings.Contains(ctl.Stdout(), "started-") {
				t.Errorf("the agent ran: %q", ctl.Stdout())
			}
		})
	}
}

// TestEscapeSpecRefusals: `supervisor exec` refuses, with one line and
// before anything starts, what used to start a box that then misbehaved.
func TestEscapeSpecRefusals(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	big := filepath.Join(t.TempDir(), "big.env")
	var env strings.Builder
	for i := 0; i < 9; i++ {
		env.WriteString("BIG" + string(rune('A'+i)) + "=" + strings.Repeat("x", 120<<10) + "\n")
	}
	if err := os.WriteFile(big, []byte(env.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		flags []string
		code  int
		want  string
	}{
		// Used to overflow deadline+grace into an instant kill (246).
		{"grace overflow", []string{"--deadline", "1h", "--grace", "2562047h"}, shared.ExitUsage, "grace"},
		// (uid_t)-1 is "unchanged" to setresuid: used to be 244.
		{"uid -1", []string{"--user", "4294967295:1000"}, shared.ExitUsage, "4294967295"},
		// The watcher's own identity: used to be accepted.
		{"watcher uid", []string{"--user", "65533:65533"}, shared.ExitRefused, "watcher's own uid"},
		// Used to end in the watcher's Go runtime dump (244).
		{"pids limit 1", []string{"--pids-limit", "1"}, shared.ExitUsage, "--pids-limit 1"},
		// Over one frame: used to hang the supervisor with no message.
		{"spec over one frame", []string{"--env-file", big}, shared.ExitUsage, "one frame"},
	} {
		t.Run(c.name, func(t *testing.T) {
			journal := sharedTempDir(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append([]string{"exec", "--runtime", "native", "--journal", journal, "--watcher", bins.Watcher}, c.flags...)
			cmd := exec.CommandContext(ctx, bins.Supervisor, append(args, "--", "/bin/true")...)
			refusal(t, cmd, c.code, c.want)
			if ents, _ := os.ReadDir(journal); len(ents) > 0 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("the journal holds %v: something was started", names)
			}
		})
	}
}
