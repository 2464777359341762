package kerneltests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// Docker is driven through its Engine API: a `docker` CLI first on PATH
// that records its calls and fails is never run on the way from exec to
// the agent's output and the box's removal; the box still dies with its
// supervisor (TestSupervisorSIGKILL) and is removed.
func TestDockerEngineAPINoCLI(t *testing.T) {
	r := rigs(t, "docker")[0]
	r.Setup(t, "api")
	t.Cleanup(func() { r.removeLeftovers() })
	fake := filepath.Join(r.Dir, "bin")
	os.MkdirAll(fake, 0o755)
	calls := filepath.Join(r.Dir, "cli-calls")
	script := "#!/bin/sh\necho \"$@\" >> " + calls + "\nexit 99\n"
	if err := os.WriteFile(filepath.Join(fake, "docker"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	res := runCmd(r.supervisor([]string{"PATH=" + fake + ":" + os.Getenv("PATH")}, "--", "sh", "-c", "echo out; echo err >&2; exit 7"))
	t.Logf("exit %d in %v; stderr %q", res.code, res.took, res.stderr)
	if res.code != 7 || res.stdout != "out\n" || !strings.Contains(res.stderr, "err") {
		t.Errorf("exit %d stdout %q stderr %q; want 7, \"out\\n\", err", res.code, res.stdout, res.stderr)
	}
	if b, err := os.ReadFile(calls); err == nil {
		t.Errorf("the docker CLI was run on the API path: %q", b)
	}
	r.assertClean()
}

// A rootful docker without userns-remap: exec says what that means, in
// one line on stderr, once; with userns-remap (or rootless) it says
// nothing. Whether the daemon remaps is read from `docker info`'s JSON.
func TestDockerRootfulStatement(t *testing.T) {
	r := rigs(t, "docker")[0]
	r.Setup(t, "rf")
	t.Cleanup(func() { r.removeLeftovers() })
	out, err := exec.Command("docker", "info", "--format", "{{json .SecurityOptions}}").Output()
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	var opts []string
	if err := json.Unmarshal(out, &opts); err != nil {
		t.Fatalf("docker info: %v: %q", err, out)
	}
	remapped := false
	for _, o := range opts {
		remapped = remapped || strings.HasPrefix(o, "name=userns") || strings.HasPrefix(o, "name=rootless")
	}
	res := runCmd(r.supervisor(nil, "--", "true"))
	n := strings.Count(res.stderr, "userns-remap")
	lines := 0
	for _, l := range strings.Split(res.stderr, "\n") {
		if strings.Contains(l, "userns-remap") {
			lines++
		}
	}
	t.Logf("security options %v; exit %d; stderr %q", opts, res.code, res.stderr)
	if res.code != 0 {
		t.Fatalf("exit %d", res.code)
	}
	if remapped && n != 0 {
		t.Errorf("a remapped daemon got the rootful statement: %q", res.stderr)
	}
	if !remapped && (lines != 1 || !strings.Contains(res.stderr, "root on the host")) {
		t.Errorf("rootful docker without userns-remap: stderr %q, want one line saying root in the box is root on the host", res.stderr)
	}
	r.assertClean()
}

// A rootful podman box runs in a user namespace of its own
// (--userns=auto): the map inside is not the identity, and the agent's
// uid seen from the host is no host account's (not in 0..65535).
func TestPodmanRootfulUserns(t *testing.T) {
	r := rigs(t, "podman")[0]
	r.Setup(t, "uns")
	t.Cleanup(func() { r.removeLeftovers() })
	marker := fmt.Sprintf("dw-userns-%d", os.Getpid())
	cmd := r.supervisor(nil, "--", "sh", "-c", "cat /proc/self/uid_map; echo started; sleep 60; true", marker)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// SIGTERM: the supervisor stops the box and removes it.
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		r.assertClean()
	}()
	sc := bufio.NewScanner(out)
	var uidMap []string
	for sc.Scan() && sc.Text() != "started" {
		uidMap = append(uidMap, sc.Text())
	}
	t.Logf("uid_map inside: %q; stderr %q", uidMap, errb.String())
	if len(uidMap) == 0 {
		t.Fatalf("no uid_map from the box; stderr %q", errb.String())
	}
	if f := strings.Fields(uidMap[0]); len(f) != 3 || f[1] == "0" || (f[0] == "0" && f[2] == "4294967295") {
		t.Errorf("uid_map inside is the identity (or maps box root to host root): %q", uidMap)
	}
	var hostUID int = -1
	ktest.WaitFor(10*time.Second, func() bool {
		for _, p := range ktest.WithMarker(marker) {
			if p.PID == cmd.Process.Pid {
				continue
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID))
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
					hostUID, _ = strconv.Atoi(f[1])
					return true
				}
			}
		}
		return false
	})
	t.Logf("the agent's uid seen from the host: %d", hostUID)
	if hostUID >= 0 && hostUID <= 65535 {
		t.Errorf("the agent runs as host uid %d: a host account's range", hostUID)
	}
	if hostUID < 0 {
		t.Errorf("no agent process with marker %s seen from the host", marker)
	}
}

// Podman's service (the socket `podman system service` serves) speaks
// the Docker-compatible API: with CONTAINER_HOST naming it, exec runs the
// box through it without a podman CLI process (a failing one is first
// on PATH), and a rootful box still gets a user namespace of its own.
func TestPodmanServiceAPI(t *testing.T) { podmanServiceExec(t, "podman") }
