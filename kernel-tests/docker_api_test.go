package kerneltests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
