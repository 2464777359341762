package kerneltests

// The kubernetes runtime's control stream rides an exec session of the
// watcher's relay to a unix socket in the pod, so the container's own
// stdout and stderr are the agent's output: `kubectl logs` shows it
// while the box runs, and the supervisor still relays it. The agent
// cannot reach that socket: the watcher takes its one connection and
// removes the listener before the agent starts.

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor/runtime/kubernetes"
)

// lockedBuf is a buffer a running command writes while the test reads.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestKubernetesLogs: a box prints a known line on stdout and one on
// stderr, then waits on its stdin. While it runs, `kubectl logs` of its
// pod (found by the instance's label) shows both lines, and so do the
// supervisor's own stdout and stderr; closing the supervisor's stdin
// ends the agent, whose exit code is the supervisor's, and the pod goes.
func TestKubernetesLogs(t *testing.T) {
	r := newK8sRig(t)
	mark := newMarker(t)
	outLine, errLine := "dw-log-out-"+mark, "dw-log-err-"+mark
	c := r.cmd(nil, r.execArgs("--stdin", "--", "sh", "-c", `echo "$1"; echo "$2" >&2; read -r x; exit 3`, "sh", outLine, errLine)...)
	stdin, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var o, e lockedBuf
	c.Stdout, c.Stderr = &o, &e
	c.WaitDelay = 10 * time.Second
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	done := make(chan struct{})
	go func() { waitErr = c.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			c.Process.Kill()
			<-done
		}
	})

	var pod, logs string
	seen := ktest.WaitFor(2*time.Minute, func() bool {
		ps := r.k.Pods(t, shared.LabelInstance+"="+r.instance)
		if len(ps) != 1 {
			return false
		}
		pod = ps[0]
		logs, _ = r.k.Kubectl("logs", pod)
		return strings.Contains(logs, outLine) && strings.Contains(logs, errLine)
	})
	if !seen {
		t.Fatalf("kubectl logs %q never showed both lines:\n%s\nsupervisor stdout %q stderr %q", pod, logs, o.String(), e.String())
	}
	t.Logf("kubectl logs %s while the box runs:\n%s", pod, logs)
	if !ktest.WaitFor(30*time.Second, func() bool {
		return strings.Contains(o.String(), outLine) && strings.Contains(e.String(), errLine)
	}) {
		t.Errorf("the supervisor's stdout %q and stderr %q do not show the agent's lines", o.String(), e.String())
	}
	if strings.Contains(o.String(), errLine) || strings.Contains(e.String(), outLine) {
		t.Errorf("the agent's streams are crossed on the supervisor: stdout %q stderr %q", o.String(), e.String())
	}
	stdin.Close()
	var code int
	select {
	case <-done:
		if ee, ok := waitErr.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if waitErr != nil {
			t.Fatal(waitErr)
		}
	case <-time.After(2 * time.Minute):
		st, _ := r.k.Kubectl("get", "pod", pod, "-o", "jsonpath={.status}")
		t.Fatalf("the supervisor did not end 2m after its stdin closed:\nstdout %q\nstderr:\n%s\npod status %s", o.String(), e.String(), st)
	}
	if code != 3 {
		t.Errorf("exit %d, want the agent's 3\nstderr:\n%s", code, e.String())
	}
	if !r.k.WaitPodGone(t, pod, ktest.Slack) {
		t.Errorf("pod %s is still there after the box ended", pod)
	}
}

// controlSocketProbe is the agent of TestEscapeKubernetesControlSocket:
// it takes the escape tool from its stdin, lists the control socket's
// mount, finds every unix socket it can name (on its file systems and in
// /proc/net/unix) and connects to each and to the control socket's path,
// finds the relay's process and tries its descriptors and ptrace, and
// ends with 5.
const controlSocketProbe = `cat > /tmp/escape && chmod 755 /tmp/escape || exit 90
echo "uid=$(id -u)"
/tmp/escape ls "$1" /proc/1/fd
socks=$( { find / -xdev -type s; find /run /tmp /dev/shm /dev -type s; } 2>/dev/null; awk 'NR>1 && substr($NF,1,1)=="/" {print $NF}' /proc/net/unix 2>/dev/null)
echo "found=$(echo $socks | tr ' ' ,)"
/tmp/escape connect "$2" $socks
for p in /proc/[0-9]*; do
	tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -q '^[^ ]*watcher relay ' || continue
	pid=${p#/proc/}
	echo "relay-pid=$pid"
	/tmp/escape ls "$p/fd"
	/tmp/escape ptrace "$pid"
	/tmp/escape read "$p/environ"
done
echo looked
exit 5`

// TestEscapeKubernetesControlSocket: the agent of a box (in a namespace
// enforcing baseline, and one enforcing restricted where the agent has
// the watcher's uid) hunts for the control stream's socket and the relay
// that carries it, and reaches neither: no socket it can name accepts
// its connection, the socket's folder is gone, the relay's descriptors
// and ptrace are refused; the box still ends normally with the agent's
// exit code.
func TestEscapeKubernetesControlSocket(t *testing.T) {
	esc, err := os.ReadFile(ktest.ToolPath(t, "escape"))
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range []string{kubernetes.PodSecurityBaseline, kubernetes.PodSecurityRestricted} {
		t.Run(level, func(t *testing.T) {
			r := newK8sRigIn(t, ktest.PodSecurity{Enforce: level})
			c := r.cmd(nil, r.execArgs("--kube-pod-security", level, "-i", "--",
				"sh", "-c", controlSocketProbe, "sh", "/run/deathwatch", kubernetes.ControlSocket)...)
			c.Stdin = bytes.NewReader(esc)
			var o, e bytes.Buffer
			c.Stdout, c.Stderr = &o, &e
			err := c.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			out := o.String()
			t.Logf("%s: exit %d\n%s\nstderr:\n%s", level, code, out, e.String())
			if code != 5 || !strings.Contains(out, "looked") {
				t.Fatalf("exit %d, want the agent's 5 after its probe", code)
			}
			l := lines(out)
			if v, ok := l["connect:"+kubernetes.ControlSocket]; !ok || v == "ok" {
				t.Errorf("the agent's connect to the control socket %s: %q", kubernetes.ControlSocket, v)
			}
			if v := l["ls:/run/deathwatch"]; strings.Contains(v, "ctl") {
				t.Errorf("the control socket's folder is still there while the agent runs: ls /run/deathwatch = %q", v)
			}
			if v := l["ls:/proc/1/fd"]; v == "" || !strings.HasPrefix(v, "E") {
				t.Errorf("the agent lists the watcher's descriptors: %q", v)
			}
			for k, v := range l {
				if strings.HasPrefix(k, "connect:") && v == "ok" {
					t.Errorf("the agent connected to the unix socket %s", strings.TrimPrefix(k, "connect:"))
				}
			}
			pid := l["relay-pid"]
			if pid == "" {
				t.Fatalf("the agent did not find the relay's process: the probe of its descriptors proves nothing")
			}
			for _, k := range []string{"ls:/proc/" + pid + "/fd", "ptrace:" + pid, "read:/proc/" + pid + "/environ"} {
				if v, ok := l[k]; !ok || !strings.HasPrefix(v, "E") {
					t.Errorf("the agent's %s of the relay: %q, want refused", k, v)
				}
			}
			if ps := r.podsIn(r.k.Namespace); len(ps) != 0 {
				t.Errorf("pods left after the box: %v", ps)
			}
		})
	}
}
