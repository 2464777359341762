package kerneltests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared/landlock"
	"deathwatch/supervisor"
	"deathwatch/supervisor/runtime/native"
)

// requireScopes fails the test on a kernel without Landlock scopes.
func requireScopes(t *testing.T) {
	t.Helper()
	requireLandlock(t, landlock.ScopeABI, "scopes", "6.12")
}

// requireLandlock fails the test on a kernel below Landlock ABI want,
// which what (the agent's layer) needs, from Linux linux.
func requireLandlock(t *testing.T, want int, what, linux string) {
	t.Helper()
	if abi, err := landlock.ABI(); err != nil || abi < want {
		t.Fatalf("Landlock ABI %d (%v): the agent's %s need ABI %d (Linux %s with landlock in the lsm= list)", abi, err, what, want, linux)
	}
}

// TestEscapeScopes: the agent's Landlock domain on every runtime. With
// --network host (and --allow-host-network) the box shares the host's
// abstract unix sockets: the agent connected to a host process's; now
// EPERM, while an abstract socket of its own works. A process put in
// the box from outside (nsenter, as an operator's exec does), as the
// agent's own uid: the agent could signal it; now EPERM.
//
// Rootful Podman cannot start a --network host box here (runc's sysfs
// mount in the box's --userns=auto namespace is refused, on main too):
// its box runs with no network. Rootless Docker's host network is
// rootlesskit's namespace, not the host's. In both the host's abstract
// socket is out of reach anyway (ECONNREFUSED), and the box holds the
// other two cases.
func TestEscapeScopes(t *testing.T) {
	requireScopes(t)
	for _, proto := range rigs(t) {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)
			name := "@" + newMarker(t)
			listenUnix(t, name)
			esc := ktest.ToolPath(t, "escape")
			e := escapeDir + "/escape"
			script := e + " connect " + name + "; " + e + " abstract-self; exec " + e + " kill-cmd sleep 1001"
			network := []string{"--network", "host", "--allow-host-network"}
			want := map[string]string{"connect:" + name: "EPERM", "abstract-self": "ok", "kill-cmd": "EPERM"}
			switch r.Name {
			case "podman":
				network = nil
				want["connect:"+name] = "ECONNREFUSED"
			case "docker-rootless":
				want["connect:"+name] = "ECONNREFUSED"
			}
			run := r.start(r.Instance, nil, append(network, "--mount", filepath.Dir(esc)+":"+escapeDir+":ro", "--", "sh", "-c", script)...)
			defer run.end()
			box, uid := run.agentStarted(t)
			r.join(t, box, uid, "sleep", "1001")
			select {
			case <-run.done:
			case <-time.After(60 * time.Second):
				t.Fatalf("the agent did not finish: %s", run.stdout())
			}
			got := lines(run.stdout())
			t.Logf("agent: %v", got)
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s=%q, want %q", k, got[k], v)
				}
			}
			r.assertClean()
		})
	}
}

// end kills the run's supervisor unless it has ended.
func (c *cwRun) end() {
	select {
	case <-c.done:
	default:
		c.kill()
	}
}

// agentStarted waits for the run's ready event and its agent's
// "uid=UID[:GID]" line, and returns the box and that line's value.
func (c *cwRun) agentStarted(t *testing.T) (box, uid string) {
	t.Helper()
	if !c.waitFor(60*time.Second, func() bool {
		uid = lines(c.stdout())["uid"]
		return uid != "" && c.event(supervisor.EventReady) != nil
	}) {
		t.Fatalf("the agent did not start: %s", c.stdout())
	}
	return c.event(supervisor.EventReady).Box, uid
}

// join starts argv in the running box as uid ("UID:GID") from outside
// it, as an operator does: nsenter into the PID (and user) namespace of
// the box's PID 1 (the engines' exec refuses the high ids rootful
// Docker's boxes run on). The process is killed when the test ends.
func (r *rig) join(t *testing.T, box, uid string, argv ...string) {
	t.Helper()
	pid := ""
	if r.Runtime == "native" {
		for _, e := range r.entries(r.Instance) {
			if e.Box == box {
				pid = e.RuntimeState[native.StateInitPID]
			}
		}
	} else if out, err := r.Engine("container", "inspect", "--format", "{{.State.Pid}}", box).Output(); err == nil {
		pid = strings.TrimSpace(string(out))
	}
	if pid == "" || pid == "0" {
		t.Fatalf("no PID 1 for box %s", box)
	}
	u, g, _ := strings.Cut(uid, ":")
	args := []string{"-t", pid, "-p", "-S", u, "-G", g}
	if readlink("/proc/self/ns/user") != readlink("/proc/"+pid+"/ns/user") {
		args = append(args, "-U")
	}
	cmd := exec.Command("nsenter", append(append(args, "--"), argv...)...)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if out.Len() > 0 {
			t.Logf("%v: %s", cmd.Args, out)
		}
	})
}

// readlink is the link's target, "" when it cannot be read.
func readlink(p string) string {
	s, _ := os.Readlink(p)
	return s
}
