package kerneltests

import (
	"os/exec"
	"path/filepath"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor/runtime/native"
)

// TestEscapeAbstractSockets (--network host): abstract unix sockets
// belong to the network namespace, not to the file system, so the
// minimal root does not hide them: with --network host the agent
// reached the host's (X11's @/tmp/.X11-unix, containerd's, systemd's).
// Now a box of network none reaches none, native refuses --network host
// with one line unless --allow-host-network is given, and with it the
// agent's Landlock domain still keeps them out (EPERM; TestEscapeScopes
// holds it on every runtime).
func TestEscapeAbstractSockets(t *testing.T) {
	rt, bins := nativeRT(t, native.Options{})
	name := "@" + newMarker(t)
	listenUnix(t, name)
	connect := func(t *testing.T, network string) string {
		b := escapeBox(t, bins)
		b.Network, b.AllowHostNetwork = network, network == "host"
		r := runBox(t, rt, b, agentSpec(escapeDir+"/escape", "connect", name), nil)
		t.Logf("network %s: exit %+v %s%s", network, r.Exit, r.Stdout, r.Stderr)
		return lines(r.Stdout)["connect:"+name]
	}
	t.Run("none", func(t *testing.T) {
		if v := connect(t, "none"); v == "ok" || v == "" {
			t.Errorf("the agent of a network-none box connected to the host's abstract socket %s (%q)", name, v)
		}
	})
	t.Run("host-refused", func(t *testing.T) {
		esc := ktest.ToolPath(t, "escape")
		cmd := exec.Command(bins.Supervisor, "exec", "--runtime", "native", "--journal", sharedTempDir(t), "--watcher", bins.Watcher,
			"--network", "host", "--mount", filepath.Dir(esc)+":"+escapeDir+":ro", "--", escapeDir+"/escape", "connect", name)
		refusal(t, cmd, shared.ExitRefused, "--allow-host-network")
	})
	// Docker's and Podman's host network is the same namespace: exec
	// refuses it on every runtime, before any box exists.
	for _, r := range rigs(t, "docker", "podman") {
		t.Run(r.Name+"-host-refused", func(t *testing.T) {
			r.setup(t)
			cmd := exec.Command(r.Bin.Supervisor, r.ExecArgs(r.Instance, "--network", "host", "--", "true")...)
			refusal(t, cmd, shared.ExitRefused, "--allow-host-network")
			if b := r.boxes(r.Instance); len(b) != 0 {
				t.Errorf("boxes created for a refused launch: %v", b)
			}
		})
	}
	t.Run("host-allowed", func(t *testing.T) {
		requireScopes(t)
		if v := connect(t, "host"); v != "EPERM" {
			t.Errorf("with --allow-host-network the agent's connect to %s: %q, want EPERM (the agent's Landlock domain scopes abstract sockets)", name, v)
		}
	})
}
