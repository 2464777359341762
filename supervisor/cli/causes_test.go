//go:build linux

package cli

// One exit code per kind of cause, on every runtime: each row drives one
// runtime's failure path through `supervisor exec`, run as its own
// process as a user runs it (the fake docker and podman at the process
// seam, a kubeconfig that reaches no cluster, an empty PATH for an
// engine that is not installed, and refusals the native runtime makes
// before it creates anything), and names the cause as shared.ExitTable
// does, so that a runtime returning another code for the same cause
// fails here, whichever runtime it is.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"deathwatch/shared"
)

// causeCode is the exit code shared.ExitTable gives the cause, the
// word(s) before the colon of its meaning ("image", "setup failed").
func causeCode(t *testing.T, cause string) int {
	t.Helper()
	for _, r := range shared.ExitTable {
		if name, _, ok := strings.Cut(r.Meaning, ":"); ok && name == cause {
			n, err := strconv.Atoi(r.Code)
			if err != nil {
				t.Fatalf("exit table row %q: code %q is not a number", cause, r.Code)
			}
			return n
		}
	}
	t.Fatalf("shared.ExitTable has no cause %q", cause)
	return 0
}

// TestOneCodePerCause: each runtime's failure paths end with the code
// of their cause.
func TestOneCodePerCause(t *testing.T) {
	podman := []string{"--runtime", "podman", "--allow-rootful", "--image", "img"}
	native := []string{"--runtime", "native"}
	with := func(base []string, more ...string) []string { return append(slices.Clone(base), more...) }
	// An API server that answers nowhere: the cluster is unreachable.
	kubeUnreachable := func(t *testing.T) {
		dir := t.TempDir()
		kc := filepath.Join(dir, "kubeconfig")
		os.WriteFile(kc, []byte("current-context: a\ncontexts: [{name: a, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\n"), 0o600)
		t.Setenv("KUBECONFIG", kc)
	}
	emptyPath := func(t *testing.T) { t.Setenv("PATH", t.TempDir()) }
	missing := func(t *testing.T) string { return filepath.Join(t.TempDir(), "nosuch") }

	for _, tc := range []struct {
		runtime, name string
		sc            fakeScenario
		setup         func(t *testing.T)
		args          func(t *testing.T) []string
		cause         string
	}{
		// The engine is missing or not running.
		{"docker", "daemon down", fakeScenario{InfoFail: "Cannot connect to the Docker daemon at unix:///nope.sock. Is the docker daemon running?"}, nil,
			func(*testing.T) []string { return with(docker, "--", "true") }, "engine"},
		{"docker", "not installed", fakeScenario{}, emptyPath, func(*testing.T) []string { return with(docker, "--", "true") }, "engine"},
		{"podman", "not installed", fakeScenario{}, emptyPath, func(*testing.T) []string { return with(podman, "--", "true") }, "engine"},
		{"sbx", "not installed", fakeScenario{}, emptyPath, func(*testing.T) []string { return []string{"--runtime", "sbx", "--image", "tmpl", "--", "true"} }, "engine"},
		{"kubernetes", "API server unreachable", fakeScenario{}, kubeUnreachable,
			func(*testing.T) []string { return []string{"--runtime", "kubernetes", "--image", "img", "--", "true"} }, "engine"},

		// The image or template is not there.
		{"docker", "image missing", fakeScenario{NoImage: true}, nil, func(*testing.T) []string { return with(docker, "--", "true") }, "image"},
		{"podman", "image missing", fakeScenario{NoImage: true}, nil, func(*testing.T) []string { return with(podman, "--", "true") }, "image"},

		// An unsafe or impossible combination.
		{"docker", "rootful engine", fakeScenario{Agent: "exit:0"}, nil,
			func(*testing.T) []string { return []string{"--runtime", "docker", "--image", "img", "--", "true"} }, "refused"},
		{"podman", "rootful engine", fakeScenario{Agent: "exit:0"}, nil,
			func(*testing.T) []string { return []string{"--runtime", "podman", "--image", "img", "--", "true"} }, "refused"},
		{"docker", "agent uid 0", fakeScenario{}, nil, func(*testing.T) []string { return with(docker, "--user", "0:0", "--", "true") }, "refused"},
		{"docker", "host network", fakeScenario{}, nil, func(*testing.T) []string { return with(docker, "--network", "host", "--", "true") }, "refused"},
		{"native", "agent uid 0", fakeScenario{}, nil, func(*testing.T) []string { return with(native, "--user", "0:0", "--", "true") }, "refused"},
		{"native", "network bridge", fakeScenario{}, nil, func(*testing.T) []string { return with(native, "--network", "bridge", "--", "true") }, "refused"},
		{"native", "host network", fakeScenario{}, nil, func(*testing.T) []string { return with(native, "--network", "host", "--", "true") }, "refused"},

		// A bad flag, argument or spec.
		{"docker", "no command", fakeScenario{}, nil, func(*testing.T) []string { return with(docker, "--") }, "usage"},
		{"docker", "no image", fakeScenario{}, nil, func(*testing.T) []string { return []string{"--runtime", "docker", "--allow-rootful", "--", "true"} }, "usage"},
		{"podman", "no image", fakeScenario{}, nil, func(*testing.T) []string { return []string{"--runtime", "podman", "--allow-rootful", "--", "true"} }, "usage"},
		{"native", "no command", fakeScenario{}, nil, func(*testing.T) []string { return with(native, "--") }, "usage"},
		{"native", "unknown flag", fakeScenario{}, nil, func(*testing.T) []string { return with(native, "--no-such-flag", "--", "true") }, "usage"},
		{"kubernetes", "no image", fakeScenario{}, kubeUnreachable, func(*testing.T) []string { return []string{"--runtime", "kubernetes", "--", "true"} }, "usage"},
		{"kubernetes", "--kube-context names no context", fakeScenario{}, kubeUnreachable,
			func(*testing.T) []string {
				return []string{"--runtime", "kubernetes", "--kube-context", "nosuch", "--image", "img", "--", "true"}
			}, "usage"},
		{"sbx", "no command", fakeScenario{}, nil, func(*testing.T) []string { return []string{"--runtime", "sbx", "--image", "tmpl", "--"} }, "usage"},

		// A copy refused.
		{"docker", "copy-in of a missing source", fakeScenario{}, nil,
			func(t *testing.T) []string { return with(docker, "--copy-in", missing(t)+":/work", "--", "true") }, "copy failed"},
		{"native", "copy-in of a missing source", fakeScenario{}, nil,
			func(t *testing.T) []string { return with(native, "--copy-in", missing(t)+":/work", "--", "true") }, "copy failed"},

		// The box could not be set up.
		{"docker", "create fails", fakeScenario{CreateFail: "Error response from daemon: Conflict. The container name is already in use"}, nil,
			func(*testing.T) []string { return with(docker, "--", "true") }, "setup failed"},
		{"docker", "start fails", fakeScenario{Agent: "exit:0", StartFail: "Error response from daemon: OCI runtime create failed: no such file"}, nil,
			func(*testing.T) []string { return with(docker, "--", "true") }, "setup failed"},
		{"podman", "run fails", fakeScenario{CreateFail: "Error: creating container storage: the container name is already in use"}, nil,
			func(*testing.T) []string { return with(podman, "--", "true") }, "setup failed"},

		// The control stream ended without an exit record.
		{"docker", "box vanished", fakeScenario{Agent: "vanish"}, nil, func(*testing.T) []string { return with(docker, "--", "true") }, "liveness lost"},
		{"podman", "box vanished", fakeScenario{Agent: "vanish"}, nil, func(*testing.T) []string { return with(podman, "--", "true") }, "liveness lost"},
	} {
		t.Run(tc.runtime+"/"+tc.name, func(t *testing.T) {
			if tc.sc.Agent == "" {
				tc.sc.Agent = "exit:0" // a launch that is not refused ends at once
			}
			fe := newFakeEngine(t, tc.sc)
			if tc.setup != nil {
				tc.setup(t)
			}
			args := []string{"--journal", filepath.Join(fe.dir, "journal"), "exec"}
			if tc.runtime != "sbx" { // an sbx box's watcher is the template's
				args = append(args, "--watcher", filepath.Join(fe.bin, "watcher"))
			}
			// The supervisor as a user runs it: its own process, its
			// main (supervisor.Init first), argv, an exit status.
			var stderr bytes.Buffer
			c := exec.Command(fe.super, append(args, tc.args(t)...)...)
			c.Stderr = &stderr
			err := c.Run()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatalf("run the supervisor: %v", err)
			}
			if want := causeCode(t, tc.cause); c.ProcessState.ExitCode() != want {
				t.Errorf("exit status %d, want %d (%s); stderr %q", c.ProcessState.ExitCode(), want, tc.cause, stderr.String())
			}
		})
	}
}
