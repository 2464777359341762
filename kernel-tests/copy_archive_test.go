package kerneltests

// Copy-in through the engine's archive endpoint (Docker, with a writable
// root: --read-write-root): the tree
// lands in the running box, its watcher waiting (and hashing the files
// ahead as they land), and the watcher checks what landed against the
// host's manifest before the agent runs. The box's file system can be
// changed between the PUT and the check, after the watcher hashed a
// file (by the engine, by whoever else reaches it): the test does that
// with docker cp while the supervisor is stopped right after the PUT,
// and the box must end with 248 verify-failed, the agent never run.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deathwatch/shared"
	"deathwatch/supervisor/supervisortest"
)

func TestCopyArchiveTampered(t *testing.T) {
	for _, proto := range rigs(t, "docker") {
		r := *proto
		r.Setup(t, "cp")
		t.Cleanup(func() { r.assertClean() })
		src := filepath.Join(r.mkdirOwned(t, "in"), "tree")
		copyTree(t, src, 1<<20)
		other := filepath.Join(r.Dir, "other")
		if err := os.WriteFile(other, []byte("not what was sent\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ name, target string }{
			{"changed file", "/" + shared.CopyStageDir + "/0/a.txt"},
			{"extra file", "/" + shared.CopyStageDir + "/0/sub/extra"},
		} {
			t.Run(c.name, func(t *testing.T) {
				os.Remove(r.eventsFile())
				p := r.pausedAt(t, supervisortest.CrashAfterStage, "--heartbeat", "5m", "--read-write-root", "--copy-in", src+":/tmp/tree", "--", "sh", "-c", "echo agent-ran")
				p.engine(t, &r, nil, "cp", other, "BOX:"+c.target)
				if code := p.resume(); code != shared.ExitCopyFailed || !strings.Contains(p.stderr.String(), "verify") || strings.Contains(p.stdout.String(), "agent-ran") {
					t.Fatalf("exit %d (want %d, the agent never run)\nstdout: %s\nstderr: %s", code, shared.ExitCopyFailed, p.stdout.String(), p.stderr.String())
				}
				last := r.events()
				if ev := last[len(last)-2]; ev.Event != "exited" || ev.Reason != string(shared.ReasonVerifyFailed) {
					t.Errorf("exited event %+v, want reason %s", ev, shared.ReasonVerifyFailed)
				}
				t.Logf("stderr: %s", strings.TrimSpace(p.stderr.String()))
			})
		}
	}
}
