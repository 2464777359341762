package kerneltests

import (
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// TestK8sClusterLogChannels is the probe behind issue 34's "the agent's
// output on the container's log": which of the container's channels the
// log (`kubectl logs`, the API's log endpoint) holds, and whether an exec
// session ends when its client is SIGKILLed, as an attach's stdin does.
//   - What an attached client reads on stdout is the container's stdout,
//     and the log holds it too: a control stream on the attach's stdout is
//     always on the log, so the log can only be the agent's plain output
//     once the box-to-host frames leave the container's stdio.
//   - An exec session's stdout and stderr reach only its client, never the
//     log: a channel the frames can take.
//   - SIGKILL of `kubectl exec -i` ends the exec'd process's stdin, so the
//     exec's EOF can be the supervisor's death like the attach's.
func TestK8sClusterLogChannels(t *testing.T) {
	k := k8sTestNamespace(t)
	name := "dw-k8s-logs"
	k8sPod(t, k, name, "localhost/deathwatch/busybox:1", nil,
		`command: [sh, -c, "echo init-out; echo init-err >&2; exec cat"]`, "stdin: true")
	phase := func() string { return k8sPhase(t, k, name) }
	if !k8sWaitFor(120*time.Second, func() bool { return phase() == "Running" }) {
		t.Fatalf("pod %s not Running after 120 s (phase %q); read %s/log/kubelet.log", name, phase(), k8sState)
	}
	uid := k8sCtl(t, k, "", "get", "pod", name, "-o", "jsonpath={.metadata.uid}")
	logs := func() string { return k8sCtl(t, k, "", "logs", name, "-c", "c") }
	logHas := func(line string) bool {
		for _, l := range strings.Split(logs(), "\n") {
			if l == line {
				return true
			}
		}
		return false
	}
	for _, line := range []string{"init-out", "init-err"} {
		if !k8sWaitFor(30*time.Second, func() bool { return logHas(line) }) {
			t.Fatalf("kubectl logs %s lacks %q, which PID 1 wrote; log:\n%s", name, line, logs())
		}
	}

	// The attach's stdout and the log are one stream: cat's echo of a line
	// written through the attach reaches both.
	attach := exec.Command(ktest.K8sKubectl, "--kubeconfig", k.Kubeconfig, "-n", k.Namespace, "attach", "-i", name, "-c", "c")
	var attachOut, attachErr syncBuffer
	attach.Stdout, attach.Stderr = &attachOut, &attachErr
	attachIn, err := attach.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := attach.Start(); err != nil {
		t.Fatal(err)
	}
	defer attach.Process.Kill()
	attached := k8sWaitFor(60*time.Second, func() bool {
		attachIn.Write([]byte("via-attach\n"))
		time.Sleep(200 * time.Millisecond)
		return strings.Contains(attachOut.String(), "via-attach")
	})
	if !attached {
		t.Fatalf("kubectl attach -i: no echo of via-attach in 60 s; stderr: %s", attachErr.String())
	}
	if !k8sWaitFor(30*time.Second, func() bool { return logHas("via-attach") }) {
		t.Fatalf("the attach's stdout carried via-attach, the log did not; log:\n%s", logs())
	}

	// An exec's output reaches its client and never the log.
	start := time.Now()
	out := k8sCtl(t, k, "", "exec", name, "-c", "c", "--", "sh", "-c", "echo exec-out; echo exec-err >&2")
	t.Logf("kubectl exec of a one-line command: %v", time.Since(start).Round(time.Millisecond))
	if strings.TrimSpace(out) != "exec-out" {
		t.Fatalf("kubectl exec stdout %q, want exec-out", out)
	}
	time.Sleep(2 * time.Second) // time for a copy of the exec's output, were there one, to reach the log
	if l := logs(); strings.Contains(l, "exec-out") || strings.Contains(l, "exec-err") {
		t.Fatalf("the log holds an exec session's output:\n%s", l)
	}

	// SIGKILL of an exec client ends its process's stdin. Under load the
	// OCI runtime can fail to start an exec'd process at all (an error on
	// kubectl's stderr, no process): such a start is logged and tried again.
	var (
		relay    *exec.Cmd
		relayIn  io.WriteCloser
		relayErr *syncBuffer
		pid      int
	)
	for try := 1; pid == 0; try++ {
		relay = exec.Command(ktest.K8sKubectl, "--kubeconfig", k.Kubeconfig, "-n", k.Namespace, "exec", "-i", name, "-c", "c", "--", "head", "-c", "1000000000")
		relayErr = &syncBuffer{}
		relay.Stdout, relay.Stderr = &syncBuffer{}, relayErr
		var err error
		if relayIn, err = relay.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := relay.Start(); err != nil {
			t.Fatal(err)
		}
		defer relay.Process.Kill()
		failed := false
		if !k8sWaitFor(60*time.Second, func() bool {
			pid = k8sPodPid(uid, "head")
			failed = pid == 0 && strings.Contains(relayErr.String(), "error")
			return pid != 0 || failed
		}) {
			t.Fatalf("no process head in pod %s 60 s after kubectl exec -i; stderr: %s", name, relayErr.String())
		}
		if failed {
			if try == 3 {
				t.Fatalf("kubectl exec -i failed to start head %d times; last stderr: %s", try, relayErr.String())
			}
			t.Logf("kubectl exec -i, try %d: %s", try, strings.TrimSpace(relayErr.String()))
			relay.Process.Kill()
			relay.Wait()
		}
	}
	relayIn.Write([]byte("x\n"))
	time.Sleep(500 * time.Millisecond)
	if k8sGone(pid) {
		t.Fatalf("head (pid %d) ended while its exec client was live; stderr: %s", pid, relayErr.String())
	}
	k8sKillClient(t, relay, pid, "head", "kubectl exec -i")
	if k8sGone(k8sPodPid(uid, "cat")) {
		t.Fatalf("PID 1 (cat) ended with the exec session")
	}
}
