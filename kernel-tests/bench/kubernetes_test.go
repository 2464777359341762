package bench

// The kubernetes runtime on the test cluster (kernel-tests/k8s/cluster.sh):
// `supervisor exec --runtime kubernetes -- true` against `kubectl run
// --rm -i --restart=Never` of the same image and command (interleaved),
// and a SIGKILL of the supervisor, and of a controller that started it
// (ktest/chainctl) → the last process of its pod's container dead,
// p50/p95/p99, beside a SIGKILLed `kubectl run -i`, whose pod runs on.
// Run counts: DEATHWATCH_BENCH_K8S_RUNS (10),
// DEATHWATCH_BENCH_K8S_KILL_TRIALS (10).

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

const rankKubernetes = rankIO + 10

func TestBenchKubernetes(t *testing.T) {
	requireBench(t)
	k := ktest.RequireK8s(t).TestNamespace(t, ktest.PodSecurity{Enforce: "baseline"})
	bin := ktest.Build(t)
	image := k.WatcherImage(t)
	dir := t.TempDir()
	instance := fmt.Sprintf("k8sbench%d", time.Now().UnixNano()%1e6)
	journal := filepath.Join(dir, "journal")
	env := append([]string{"PATH=" + os.Getenv("PATH"), "HOME=/root"}, k.Env()...)
	sup := func(args ...string) *exec.Cmd {
		c := exec.Command(bin.Supervisor, append([]string{"--instance", instance, "--journal", journal}, args...)...)
		c.Env = env
		return c
	}
	execArgs := func(extra ...string) []string {
		return append([]string{"exec", "--runtime", "kubernetes", "--image", image, "--watcher-in-image", ktest.ImageWatcher}, extra...)
	}
	t.Cleanup(func() {
		sup("reconcile").Run()
		for _, p := range k.Pods(t, "io.deathwatch.instance="+instance) {
			k.DeletePod(p)
		}
	})

	s := newSection(t, rankKubernetes, "Kubernetes: launch to exit, and SIGKILL of the supervisor or its controller", "what", "n", "p50", "p95", "p99", "max")
	defer s.Log()

	// Launch: interleaved, one warm-up each.
	runs := runsFromEnv("DEATHWATCH_BENCH_K8S_RUNS", 10)
	overrides := `{"apiVersion":"v1","spec":{"automountServiceAccountToken":false}}`
	cands := []struct {
		name string
		cmd  func(i int) *exec.Cmd
		wall []time.Duration
	}{
		{name: "supervisor exec --runtime kubernetes -- true", cmd: func(int) *exec.Cmd { return sup(execArgs("--", "true")...) }},
		{name: "kubectl run --rm -i --restart=Never -- true", cmd: func(i int) *exec.Cmd {
			c := exec.Command(ktest.K8sKubectl, "--kubeconfig", k.Kubeconfig, "-n", k.Namespace, "run", fmt.Sprintf("%s-kubectl-%d", instance, i),
				"--rm", "-i", "--restart=Never", "--image", image, "--image-pull-policy=Never", "--overrides", overrides, "--command", "--", "true")
			c.Env = env
			return c
		}},
	}
	for i := -1; i < runs; i++ {
		for j := range cands {
			c := &cands[(j+i+1)%len(cands)]
			cmd := c.cmd(i + 1)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			t0 := time.Now()
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v\n%s", c.name, err, out.String())
			}
			if i >= 0 {
				c.wall = append(c.wall, time.Since(t0))
			}
		}
	}
	for _, c := range cands {
		st := summarize(c.wall)
		s.Row(c.name, fmt.Sprint(st.N), fms(st.P50), fms(st.P95), fms(st.P99), fms(st.Max))
		s.Set(c.name, st)
	}

	// SIGKILL of the supervisor, or of the controller that started it
	// (interleaved) → every process of the box dead.
	trials := runsFromEnv("DEATHWATCH_BENCH_K8S_KILL_TRIALS", 10)
	chainctl := ktest.ToolPath(t, "chainctl")
	dead := map[bool][]time.Duration{}
	for i := 0; i < 2*trials; i++ {
		controller := i%2 == 1
		ev := filepath.Join(dir, fmt.Sprintf("events-%d.jsonl", i))
		cmd := sup(execArgs("--events", ev, "--", "sh", "-c", "sleep 600 & (trap '' TERM; exec sleep 600) & echo armed; echo ready; wait")...)
		if controller {
			cmd = exec.Command(chainctl, append([]string{"-n", "1", "-mode", "main", "--"}, cmd.Args...)...)
			cmd.Env = env
		}
		var out lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// chainctl prints ready once the agent said it (after armed).
		if !ktest.WaitFor(2*time.Minute, func() bool { s := out.String(); return strings.Contains(s, "armed") || strings.Contains(s, "\nready") }) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("trial %d: the agent never said armed:\n%s", i, out.String())
		}
		pod, err := readyBox(ev, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ps := k.ContainerProcs(t, pod, "box")
		t0 := time.Now()
		cmd.Process.Kill()
		took, left := ktest.WaitDead(ps, t0, 30*time.Second)
		cmd.Wait()
		if len(left) > 0 {
			t.Fatalf("trial %d: alive 30 s after the SIGKILL: %s", i, ktest.Describe(left))
		}
		dead[controller] = append(dead[controller], took)
		if out, err := sup("reconcile").CombinedOutput(); err != nil {
			t.Fatalf("reconcile: %v\n%s", err, out)
		}
	}
	st := summarize(dead[false])
	s.Row("supervisor SIGKILL → last process of the pod dead", fmt.Sprint(st.N), fms(st.P50), fms(st.P95), fms(st.P99), fms(st.Max))
	s.Set("sigkill_dead", st)
	st = summarize(dead[true])
	s.Row("controller SIGKILL → last process of the pod dead", fmt.Sprint(st.N), fms(st.P50), fms(st.P95), fms(st.P99), fms(st.Max))
	s.Set("controller_sigkill_dead", st)

	// SIGKILL of `kubectl run --rm -i`: its pod's processes still run a
	// while later (nothing watches the client).
	const after = 10 * time.Second
	alive := 0
	for i := 0; i < 3; i++ {
		pod := fmt.Sprintf("%s-kill-%d", instance, i)
		cmd := exec.Command(ktest.K8sKubectl, "--kubeconfig", k.Kubeconfig, "-n", k.Namespace, "run", pod,
			"--rm", "-i", "--restart=Never", "--image", image, "--image-pull-policy=Never", "--overrides", overrides, "--command", "--", "sh", "-c", "echo armed; sleep 600")
		cmd.Env = env
		var out lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if !ktest.WaitFor(2*time.Minute, func() bool { return strings.Contains(out.String(), "armed") }) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("kubectl run %d: the agent never said armed:\n%s", i, out.String())
		}
		ps := k.ContainerProcs(t, pod, pod)
		cmd.Process.Kill()
		cmd.Wait()
		time.Sleep(after)
		living := 0
		for _, p := range ps {
			if p.Alive() {
				living++
			}
		}
		if len(ps) > 0 && living == len(ps) {
			alive++
		}
		k.DeletePod(pod)
	}
	s.Row(fmt.Sprintf("kubectl run --rm -i SIGKILL → pod's processes alive %v later", after), "3", fmt.Sprintf("%d of 3", alive), "", "", "")
	s.Note("the same image (busybox + watcher) and command; pods placed by the scheduler, imagePullPolicy Never")
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }
