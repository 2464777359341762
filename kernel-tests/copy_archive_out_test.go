package kerneltests

// Copy-out through the engine's archive endpoint (Docker, from a box
// with a writable root: --read-write-root; the endpoint does not see a
// read-only root's tmpfs /tmp, and frames carry that): the watcher
// sends the manifest of what may leave once the agent is dead; the host
// reads the tree with GET /containers/{id}/archive (dockerd reads it as
// root) and keeps only what the manifest names and hashes. (The round
// trip of every file kind through the archive both ways is
// TestCopyRoundTrip/docker, which checks both transports.)

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor"
	boxcopy "deathwatch/supervisor/copy"
	"deathwatch/supervisor/supervisortest"
)

// pausedRun is a supervisor stopped by itself at a crash point.
type pausedRun struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	box            string
}

// pausedAt starts the supervisor with args and waits until it stopped
// at crash point point (killing it and failing the test if that never
// comes).
func (r *rig) pausedAt(t *testing.T, point string, args ...string) *pausedRun {
	t.Helper()
	p := r.stoppedAt(t, point, args...)
	p.box = r.waitEvent("created", time.Second).Box
	return p
}

// stoppedAt is pausedAt for the first launch that reaches point, which
// need not be the run's own (a --stage probe's: no event names its box).
func (r *rig) stoppedAt(t *testing.T, point string, args ...string) *pausedRun {
	t.Helper()
	p := &pausedRun{cmd: r.supervisor([]string{supervisortest.CrashPointEnv + "=" + point}, args...)}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A supervisor that exited instead (a zombie until Wait) fails at once.
	ktest.WaitFor(60*time.Second+ktest.Slack, func() bool {
		st, err := ktest.ReadStat(p.cmd.Process.Pid)
		return err != nil || st.State == 'T' || st.State == 'Z'
	})
	if !ktest.Stopped(p.cmd.Process.Pid) {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		t.Fatalf("the supervisor never stopped at %s\n%s", point, p.stderr.String())
	}
	return p
}

// engine runs the engine's CLI (BOX in args is the paused box) while
// the supervisor is stopped; a failure kills it and fails the test.
func (p *pausedRun) engine(t *testing.T, r *rig, stdin io.Reader, args ...string) {
	t.Helper()
	for i := range args {
		args[i] = strings.ReplaceAll(args[i], "BOX", p.box)
	}
	cmd := r.Engine(args...)
	cmd.Stdin = stdin
	if b, err := cmd.CombinedOutput(); err != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		t.Fatalf("%s %v: %v: %s", r.Name, args, err, b)
	}
}

// resume lets the supervisor go on and returns its exit status.
func (p *pausedRun) resume() int {
	p.cmd.Process.Signal(syscall.SIGCONT)
	err := p.cmd.Wait()
	if ee, ok := err.(interface{ ExitCode() int }); ok {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// TestCopyArchiveOutRootOnly: dockerd reads the box as root, so the
// archive holds what the agent could not read: a root-only file and a
// second name of it (the hard link an agent would plant where
// fs.protected_hardlinks is off; here the engine puts both into the
// created box, as the host's protected_hardlinks=1 stops the agent).
// Neither comes out, nor the agent's symlink to a host path; the
// agent's own file does, and the drop is counted.
func TestCopyArchiveOutRootOnly(t *testing.T) {
	for _, proto := range rigs(t, "docker") {
		r := *proto
		r.Setup(t, "cp")
		t.Cleanup(func() { r.assertClean() })
		out := r.mkdirOwned(t, "out")
		victim := filepath.Join(r.mkdirOwned(t, "victim"), "secret")
		if err := os.WriteFile(victim, []byte("host secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var planted bytes.Buffer
		tw := tar.NewWriter(&planted)
		tw.WriteHeader(&tar.Header{Name: "res/", Typeflag: tar.TypeDir, Mode: 0o777})
		tw.WriteHeader(&tar.Header{Name: "res/secret", Typeflag: tar.TypeReg, Mode: 0o600, Size: 12})
		tw.Write([]byte("root secret\n"))
		tw.WriteHeader(&tar.Header{Name: "res/hard", Typeflag: tar.TypeLink, Linkname: "res/secret"})
		tw.Close()

		p := r.pausedAt(t, supervisortest.CrashAfterCreate, "--read-write-root", "--copy-out", "/tmp/res:"+out, "--", "sh", "-c",
			fmt.Sprintf(`cat /tmp/res/secret 2>/dev/null && echo read-it; echo mine > /tmp/res/f && ln -s %s /tmp/res/abs && ls -l /tmp/res`, victim))
		p.engine(t, &r, &planted, "cp", "-", "BOX:/tmp")
		if code := p.resume(); code != 0 || strings.Contains(p.stdout.String(), "read-it") {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, p.stdout.String(), p.stderr.String())
		}
		if b, _ := os.ReadFile(filepath.Join(out, "res/f")); string(b) != "mine\n" {
			t.Errorf("res/f = %q", b)
		}
		for _, p := range []string{"res/secret", "res/hard", "res/abs"} {
			if _, err := os.Lstat(filepath.Join(out, p)); err == nil {
				t.Errorf("%s came out", p)
			}
		}
		if m, _ := os.ReadFile(filepath.Join(out, "res.manifest")); strings.Contains(string(m), `"secret"`) || strings.Contains(string(m), `"hard"`) {
			t.Errorf("the manifest names the root-only file:\n%s", m)
		}
		var verified *supervisor.Event
		for _, ev := range r.events() {
			if ev.Event == "verified" {
				verified = &ev
			}
		}
		if verified == nil || verified.Transport != boxcopy.TransportArchive || verified.Dropped != 2 || verified.Refused != 1 {
			t.Errorf("verified event %+v: want by archive, 2 dropped, 1 symlink refused", verified)
		}
		t.Logf("stderr: %s", strings.TrimSpace(p.stderr.String()))
	}
}

// TestCopyArchiveOutTampered: the box's tree changes between the
// watcher's manifest and the engine's read (the supervisor stops itself
// there; the test changes a file with docker cp): 248 verify-failed,
// nothing of the copy-out kept, the box removed.
func TestCopyArchiveOutTampered(t *testing.T) {
	for _, proto := range rigs(t, "docker") {
		r := *proto
		r.Setup(t, "cp")
		t.Cleanup(func() { r.assertClean() })
		out := r.mkdirOwned(t, "out")
		other := filepath.Join(r.Dir, "f")
		// The same size as what was hashed: the digest, not the length,
		// must catch it.
		if err := os.WriteFile(other, []byte("DATA\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// The heartbeat outlasts the pause (the watcher waits for the host
		// meanwhile, answering its pings).
		p := r.pausedAt(t, supervisortest.CrashBeforeFetch, "--heartbeat", "5m", "--read-write-root", "--copy-out", "/tmp/res:"+out, "--", "sh", "-c",
			`mkdir -p /tmp/res/sub && echo data > /tmp/res/f && echo more > /tmp/res/sub/g`)
		p.engine(t, &r, nil, "cp", other, "BOX:/tmp/res/f")
		if code := p.resume(); code != shared.ExitCopyFailed || !strings.Contains(p.stderr.String(), "verify-failed") || !strings.Contains(p.stderr.String(), "SHA-256") {
			t.Fatalf("exit %d (want %d, a digest mismatch)\nstderr: %s", code, shared.ExitCopyFailed, p.stderr.String())
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("kept after a failed verification: %v", ents)
		}
		last := r.events()
		if ev := last[len(last)-2]; ev.Event != "exited" || ev.Reason != string(shared.ReasonVerifyFailed) {
			t.Errorf("exited event %+v, want reason %s", ev, shared.ReasonVerifyFailed)
		}
		t.Logf("stderr: %s", strings.TrimSpace(p.stderr.String()))
	}
}

// TestCopyArchiveOutSupervisorKilled: SIGKILL of the supervisor while
// it reads the archive (1 GiB of the agent's zeros): the watcher sees
// the stream end and exits, the engine removes the box, and reconcile
// closes the journal entry; no object of the copy is left to remove.
func TestCopyArchiveOutSupervisorKilled(t *testing.T) {
	for _, proto := range rigs(t, "docker") {
		r := *proto
		r.Setup(t, "cp")
		t.Cleanup(func() { r.assertClean() })
		out := r.mkdirOwned(t, "out")
		p := r.pausedAt(t, supervisortest.CrashBeforeFetch, "--read-write-root", "--copy-out", "/tmp/res:"+out, "--copy-out-limit", "2g", "--", "sh", "-c",
			`mkdir -p /tmp/res && dd if=/dev/zero of=/tmp/res/zeros bs=1M count=1024 2>/dev/null`)
		p.cmd.Process.Signal(syscall.SIGCONT)
		r.killMidCopy(t, p.cmd, "exported")
	}
}
