package kerneltests

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// Rootless `podman system service`, as controllers often run it: the
// supervisor, as the same user and without --allow-rootful, drives the
// box through the service's API, with no podman CLI process, and takes
// it for rootless (podman 4's Docker-compatible /info names no rootless
// option: the socket's listener says it).
func TestPodmanServiceAPIRootless(t *testing.T) { podmanServiceExec(t, "podman-rootless") }

// podmanServiceExec starts `podman system service` on a socket of its
// own as the rig's user, and runs a box through it with a podman CLI
// on PATH that fails and records any call: the box runs (its exit
// status comes back), its ids are not the host's, no CLI was run and
// nothing is left.
func podmanServiceExec(t *testing.T, rigName string) {
	r := rigs(t, rigName)[0]
	r.Setup(t, "psvc")
	t.Cleanup(func() { r.removeLeftovers() })
	sock := r.podmanService(t)
	fake := filepath.Join(r.Dir, "bin")
	os.MkdirAll(fake, 0o755)
	calls := filepath.Join(r.Dir, "cli-calls")
	if err := os.WriteFile(filepath.Join(fake, "podman"), []byte("#!/bin/sh\necho \"$@\" >> "+calls+"\nexit 99\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res := runCmd(r.supervisor([]string{"PATH=" + fake + ":" + os.Getenv("PATH"), "CONTAINER_HOST=unix://" + sock},
		"--", "sh", "-c", "cat /proc/self/uid_map; exit 4"))
	t.Logf("exit %d in %v; stdout %q; stderr %q", res.code, res.took, res.stdout, res.stderr)
	if res.code != 4 {
		t.Errorf("exit %d, want 4; stderr %q", res.code, res.stderr)
	}
	// Root in the box is the user outside: the first line maps 0 to a
	// host id other than 0.
	if f := strings.Fields(res.stdout); len(f) < 3 || f[1] == "0" {
		t.Errorf("uid_map inside %q: the box shares the host's ids", res.stdout)
	}
	if b, err := os.ReadFile(calls); err == nil {
		t.Errorf("the podman CLI was run on the API path: %q", b)
	}
	r.assertClean()
}

// podmanService starts `podman system service` as the rig's user on a
// socket in the rig's folder, waits for the socket, and stops the
// service (its process group) when the test ends; it returns the
// socket's path.
func (r *rig) podmanService(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(r.Dir, "podman.sock")
	svc := r.Command(nil, "podman", "system", "service", "--time", "0", "unix://"+sock)
	svc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := svc.Start(); err != nil {
		t.Fatalf("podman system service: %v", err)
	}
	t.Cleanup(func() {
		syscall.Kill(-svc.Process.Pid, syscall.SIGTERM)
		svc.Wait()
	})
	if !ktest.WaitFor(60*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }) {
		t.Fatalf("podman system service made no socket at %s", sock)
	}
	return sock
}
