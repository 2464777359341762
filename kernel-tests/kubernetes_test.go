package kerneltests

// The kubernetes runtime on a real single-node cluster (cluster.sh;
// nothing mocked): exit codes and output, secrets only in the spec
// frame, a SIGKILLed supervisor's agent dead and its pod removed by
// reconcile, a SIGSTOPped supervisor's pod ended by the heartbeat, a
// foreign pod with forged labels left alone, and the crash-window rows.
// Every test FAILS when the cluster is not up.

import (
	"bytes"
	"deathwatch/supervisor/journal"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/hostcheck"
	"deathwatch/supervisor/reconcile"
	"deathwatch/supervisor/runtime/kubernetes"
	"deathwatch/supervisor/supervisortest"
)

// k8sRig is one instance of the kubernetes runtime on the test cluster,
// in a namespace of the test's own.
type k8sRig struct {
	t        *testing.T
	k        *ktest.K8s
	bin      ktest.Binaries
	image    string
	instance string
	dir      string
}

func newK8sRig(t *testing.T) *k8sRig {
	return newK8sRigIn(t, ktest.PodSecurity{Enforce: "baseline"})
}

// newK8sRigIn is a rig in a namespace of the test's own with the Pod
// Security levels ps.
func newK8sRigIn(t *testing.T, ps ktest.PodSecurity) *k8sRig {
	k := ktest.RequireK8s(t).TestNamespace(t, ps)
	r := &k8sRig{t: t, k: k, bin: ktest.Build(t), image: k.WatcherImage(t), dir: t.TempDir()}
	r.instance = fmt.Sprintf("k8s%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() {
		for _, p := range k.Pods(t, shared.LabelInstance+"="+r.instance) {
			t.Logf("cleanup: deleting pod %s the test left", p)
			k.DeletePod(p)
		}
	})
	return r
}

func (r *k8sRig) journal() string { return filepath.Join(r.dir, "journal") }

// cmd is the supervisor with the kubernetes runtime's environment plus env.
func (r *k8sRig) cmd(env []string, args ...string) *exec.Cmd {
	return ktest.CommandAs("", append(r.k.Env(), env...), r.bin.Supervisor, args...)
}

func (r *k8sRig) execArgs(extra ...string) []string {
	return append([]string{"--instance", r.instance, "--journal", r.journal(), "exec", "--runtime", "kubernetes",
		"--image", r.image, "--watcher-in-image", ktest.ImageWatcher}, extra...)
}

// run runs exec to its end.
func (r *k8sRig) run(env []string, extra ...string) (code int, stdout, stderr string) {
	r.t.Helper()
	c := r.cmd(env, r.execArgs(extra...)...)
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	t0 := time.Now()
	err := c.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatalf("supervisor exec: %v", err)
	}
	r.t.Logf("exec %v: exit %d in %v", extra, code, time.Since(t0).Round(time.Millisecond))
	return code, o.String(), e.String()
}

// reconcile runs `supervisor reconcile --json`.
func (r *k8sRig) reconcile() (int, reconcile.Report) {
	r.t.Helper()
	c := r.cmd(nil, "--instance", r.instance, "--journal", r.journal(), "reconcile", "--json")
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatalf("reconcile: %v", err)
	}
	var rep reconcile.Report
	if err := json.Unmarshal(o.Bytes(), &rep); err != nil {
		r.t.Fatalf("reconcile (exit %d): %v\n%s\n%s", code, err, o.String(), e.String())
	}
	ktest.CheckOutput(r.t, ktest.SchemaReconcile, o.Bytes())
	return code, rep
}

// start starts an exec the test drives (kills, stops), as the crash
// matrix's cwRun.
func (r *k8sRig) start(env []string, extra ...string) *cwRun {
	r.t.Helper()
	ev := filepath.Join(r.dir, fmt.Sprintf("events-%d.jsonl", time.Now().UnixNano()))
	os.WriteFile(ev, nil, 0o644)
	run := &cwRun{events: ev, done: make(chan struct{})}
	run.cmd = r.cmd(env, r.execArgs(append([]string{"--events", ev}, extra...)...)...)
	run.cmd.Stdout, run.cmd.Stderr = cwLocked{run}, cwLocked{run}
	if err := run.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() { run.cmd.Wait(); close(run.done) }()
	r.t.Cleanup(func() {
		select {
		case <-run.done:
		default:
			run.cmd.Process.Signal(syscall.SIGCONT)
			run.cmd.Process.Kill()
			<-run.done
		}
	})
	return run
}

// containerProcs is every host process of the pod's box container.
func (r *k8sRig) containerProcs(pod string) []ktest.Proc {
	r.t.Helper()
	return r.k.ContainerProcs(r.t, pod, "box")
}

func TestKubernetesExitCodesAndOutput(t *testing.T) {
	r := newK8sRig(t)
	code, out, errOut := r.run(nil, "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 7")
	if code != 7 || out != "to-stdout\n" || !strings.Contains(errOut, "to-stderr") {
		t.Errorf("exit %d stdout %q stderr %q, want 7, %q and to-stderr", code, out, errOut, "to-stdout\n")
	}
	if code, _, errOut := r.run(nil, "--", "sh", "-c", "kill -TERM $$"); code != 128+15 {
		t.Errorf("an agent killed by SIGTERM: exit %d, want 143\n%s", code, errOut)
	}
	if code, _, errOut := r.run(nil, "--deadline", "2s", "--grace", "1s", "--", "sleep", "60"); code != shared.ExitDeadline {
		t.Errorf("deadline: exit %d, want %d\n%s", code, shared.ExitDeadline, errOut)
	}
	if code, _, errOut := r.run(nil, "--", "/no/such/cmd"); code != shared.ExitNotFound {
		t.Errorf("missing command: exit %d, want 127\n%s", code, errOut)
	}
	// Refused before anything exists, one line each.
	for _, tc := range []struct{ args []string }{{[]string{"--pids-limit", "50"}}, {[]string{"--network", "host"}}} {
		code, _, errOut := r.run(nil, append(tc.args, "--", "true")...)
		if code != shared.ExitRefused || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want %d and one line", tc.args, code, errOut, shared.ExitRefused)
		}
	}
	// An image the node does not hold (imagePullPolicy Never): 242
	// once the pod says so, and the pod is gone after.
	c := r.cmd(nil, "--instance", r.instance, "--journal", r.journal(), "exec", "--runtime", "kubernetes",
		"--image", "localhost/deathwatch/no-such-image:1", "--watcher-in-image", ktest.ImageWatcher, "--", "true")
	mout, err := c.CombinedOutput()
	if ee, _ := err.(*exec.ExitError); ee == nil || ee.ExitCode() != shared.ExitImage || strings.Count(strings.TrimSpace(string(mout)), "\n") != 0 {
		t.Errorf("a missing image: %v, %q; want %d and one line", err, mout, shared.ExitImage)
	}
	if ps := r.k.Pods(t, shared.LabelInstance+"="+r.instance); len(ps) != 0 {
		t.Errorf("pods left after every exec ended: %v", ps)
	}
}

func TestKubernetesSecretOnlyInTheSpecFrame(t *testing.T) {
	r := newK8sRig(t)
	secret := "dw-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	run := r.start([]string{"DW_SECRET=" + secret}, "--env", "DW_SECRET", "--",
		"sh", "-c", `[ "${#DW_SECRET}" -gt 20 ] && echo has-secret; echo armed; sleep 30`)
	if !run.waitFor(2*time.Minute, func() bool { return strings.Contains(run.stdout(), "armed") }) {
		t.Fatalf("the agent never said armed:\n%s", run.stdout())
	}
	if !strings.Contains(run.stdout(), "has-secret") {
		t.Errorf("the agent did not get the secret:\n%s", run.stdout())
	}
	ev := run.event(supervisor.EventReady)
	if ev == nil {
		t.Fatal("no ready event")
	}
	for what, args := range map[string][]string{
		"the pod (spec, labels, annotations, status)": {"get", "pod", ev.Box, "-o", "json"},
		"the events": {"get", "events", "-o", "json"},
		"the logs":   {"logs", ev.Box, "-c", "box"},
	} {
		out, err := r.k.Kubectl(args...)
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		if strings.Contains(out, secret) {
			t.Errorf("the secret is in %s", what)
		}
		t.Logf("%s: %d bytes, no secret", what, len(out))
	}
	filepath.Walk(r.journal(), func(p string, fi os.FileInfo, err error) error {
		if b, _ := os.ReadFile(p); err == nil && !fi.IsDir() && bytes.Contains(b, []byte(secret)) {
			t.Errorf("the secret is in the journal file %s", p)
		}
		return nil
	})
	run.cmd.Process.Signal(syscall.SIGTERM)
	<-run.done
}

// startArmed starts an agent that forks a setsid'd and a TERM-ignoring
// descendant and waits until it is armed; it returns the run, the pod
// and the container's processes.
func (r *k8sRig) startArmed(extra ...string) (*cwRun, string, []ktest.Proc) {
	r.t.Helper()
	run := r.start(nil, append(extra, "--", "sh", "-c", cwAgent)...)
	if !run.waitFor(2*time.Minute, func() bool { return strings.Contains(run.stdout(), "armed") }) {
		r.t.Fatalf("the agent never said armed:\n%s", run.stdout())
	}
	ev := run.event(supervisor.EventReady)
	if ev == nil {
		r.t.Fatal("no ready event")
	}
	ps := r.containerProcs(ev.Box)
	if len(ps) < 4 {
		r.t.Fatalf("pod %s: %d processes on the host, want the watcher and the agent's three", ev.Box, len(ps))
	}
	return run, ev.Box, ps
}

func (r *k8sRig) reconcileRemoves(pod string) {
	r.t.Helper()
	t0 := time.Now()
	code, rep := r.reconcile()
	if code != 0 || len(rep.Removed)+len(rep.Closed) == 0 {
		r.t.Errorf("reconcile: exit %d, %+v", code, rep)
	}
	if !r.k.WaitPodGone(r.t, pod, ktest.Slack) {
		r.t.Errorf("pod %s is still there after reconcile", pod)
	}
	r.t.Logf("reconcile removed pod %s: %v", pod, time.Since(t0).Round(time.Millisecond))
}

func TestKubernetesSupervisorKilled(t *testing.T) {
	r := newK8sRig(t)
	run, pod, ps := r.startArmed()
	t0 := time.Now()
	run.cmd.Process.Kill()
	took, left := ktest.WaitDead(ps, t0, 10*time.Second+ktest.Slack)
	if len(left) > 0 {
		t.Fatalf("after the supervisor's SIGKILL, alive: %s", ktest.Describe(left))
	}
	t.Logf("supervisor SIGKILL -> every process of the box dead: %v (%d processes)", took, len(ps))
	<-run.done
	// ls shows the pod the dead supervisor left, its owner gone.
	lsOut, err := r.cmd(nil, "--instance", r.instance, "--journal", r.journal(), "ls", "--json").Output()
	var rows []struct {
		Box, Runtime, Owner string
		BoxState            string `json:"box_state"`
	}
	if err != nil || json.Unmarshal(lsOut, &rows) != nil || len(rows) != 1 || rows[0].Box != pod || rows[0].Runtime != "kubernetes" || rows[0].Owner != "gone" {
		t.Errorf("ls: %v\n%s", err, lsOut)
	} else {
		ktest.CheckOutput(t, ktest.SchemaLs, lsOut)
		t.Logf("ls: %s %s box %s owner %s", rows[0].Box, rows[0].Runtime, rows[0].BoxState, rows[0].Owner)
	}
	r.reconcileRemoves(pod)
}

func TestKubernetesHeartbeatEndsAFrozenSupervisorsPod(t *testing.T) {
	r := newK8sRig(t)
	const hb = 3 * time.Second
	run, pod, ps := r.startArmed("--heartbeat", hb.String())
	t0 := time.Now()
	run.cmd.Process.Signal(syscall.SIGSTOP)
	took, left := ktest.WaitDead(ps, t0, hb+ktest.Slack)
	if len(left) > 0 {
		t.Fatalf("a frozen supervisor's box still runs %v after SIGSTOP (heartbeat %v): %s", hb+ktest.Slack, hb, ktest.Describe(left))
	}
	t.Logf("supervisor SIGSTOP -> every process of the box dead: %v (heartbeat %v)", took, hb)
	run.cmd.Process.Kill()
	run.cmd.Process.Signal(syscall.SIGCONT)
	<-run.done
	r.reconcileRemoves(pod)
}

func TestKubernetesForeignPodLeftAlone(t *testing.T) {
	r := newK8sRig(t)
	tag := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	forged := map[string]*journal.Entry{
		"dwforged-nonce-" + tag:   nil, // journaled below with another nonce
		"dwforged-noentry-" + tag: nil,
	}
	for name := range forged {
		launch := "forged-" + name
		r.k.CreatePod(t, map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "labels": map[string]string{
				shared.LabelManaged: "true", shared.LabelInstance: r.instance, shared.LabelLaunchID: launch, shared.LabelNonce: "forged"}},
			"spec": map[string]any{"nodeName": r.k.Node, "restartPolicy": "Never", "automountServiceAccountToken": false,
				"terminationGracePeriodSeconds": 0,
				"containers":                    []map[string]any{{"name": "c", "image": r.image, "imagePullPolicy": "Never", "command": []string{"sleep", "600"}}}},
		})
		t.Cleanup(func() { r.k.DeletePod(name) })
	}
	j, err := journal.Open(r.journal(), r.instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := "dwforged-nonce-" + tag
	if err := j.Put(&journal.Entry{LaunchID: "forged-" + name, Instance: r.instance, Box: name, Runtime: "kubernetes",
		Nonce: "the-journaled-nonce", Owner: supervisortest.DeadOwner(t), State: journal.StateStarted, Created: time.Now().UTC(),
		RuntimeState: map[string]string{"kubernetes.namespace": r.k.Namespace}}); err != nil {
		t.Fatal(err)
	}
	code, rep := r.reconcile()
	if code != shared.ExitBlocked || len(rep.Blocked) != 2 || len(rep.Removed) != 0 {
		t.Errorf("reconcile: exit %d, report %+v; want %d with both pods blocked", code, rep, shared.ExitBlocked)
	}
	for _, b := range rep.Blocked {
		t.Logf("blocked: %s: %s", b.Box, b.Reason)
	}
	for name := range forged {
		if !r.k.PodExists(t, name) {
			t.Errorf("reconcile deleted the foreign pod %s", name)
		}
	}
}

// The crash-window rows for this runtime: SIGKILL the supervisor at
// every lifecycle point, reconcile, and nothing of the launch is left.
func TestKubernetesCrashWindows(t *testing.T) {
	r := newK8sRig(t)
	for _, point := range cwPoints {
		if point == supervisortest.CrashInRun {
			continue // one-step runtimes only: a pod is created, then attached
		}
		t.Run(point, func(t *testing.T) {
			var env []string
			args := []string{"--", "sh", "-c", cwAgent}
			if point != "running" {
				env = []string{supervisortest.CrashPointEnv + "=" + point}
			}
			if point == supervisortest.CrashRemoving {
				args = []string{"--", "sh", "-c", "echo armed"} // the agent ends; the supervisor stops as it removes
			}
			run := r.start(env, args...)
			ok := run.waitFor(2*time.Minute, func() bool {
				if point == "running" {
					return strings.Contains(run.stdout(), "armed")
				}
				return run.stopped()
			})
			if !ok {
				run.kill() // its box must not block the points after this one
				t.Fatalf("never reached %s:\n%s", point, run.stdout())
			}
			var box string
			var ps []ktest.Proc
			if ev := run.event(supervisor.EventJournaled); ev != nil {
				box = ev.Box
			}
			if ev := run.event(supervisor.EventReady); ev != nil && point == "running" {
				ps = r.k.ContainerProcs(t, ev.Box, "box")
			}
			t0 := time.Now()
			run.cmd.Process.Kill()
			run.cmd.Process.Signal(syscall.SIGCONT)
			<-run.done
			if len(ps) > 0 {
				took, left := ktest.WaitDead(ps, t0, 10*time.Second+ktest.Slack)
				if len(left) > 0 {
					t.Fatalf("alive after the SIGKILL: %s", ktest.Describe(left))
				}
				t.Logf("%s: every process of the box dead %v after the SIGKILL", point, took)
			}
			code, rep := r.reconcile()
			if code != 0 {
				t.Errorf("reconcile: exit %d, %+v", code, rep)
			}
			if box != "" && !r.k.WaitPodGone(t, box, ktest.Slack) {
				t.Errorf("pod %s left after reconcile", box)
			}
			if ps := r.k.Pods(t, shared.LabelInstance+"="+r.instance); len(ps) != 0 {
				t.Errorf("pods of the instance left: %v", ps)
			}
			j, _ := journal.Open(r.journal(), r.instance, nil)
			es, _, _ := j.List()
			for _, e := range es {
				if e.State != journal.StateRemoved {
					t.Errorf("journal entry %s left %s", e.LaunchID, e.State)
				}
			}
		})
	}
}

// prove-deathwatch and doctor on this runtime: every path within a
// generous ceiling, nothing left; doctor finds the API server and RBAC.
func TestKubernetesProveAndDoctor(t *testing.T) {
	r := newK8sRig(t)
	argv := []string{"--instance", r.instance, "--journal", r.journal(), "prove-deathwatch", "--json", "--runtime", "kubernetes",
		"--image", r.image, "--watcher-in-image", ktest.ImageWatcher, "--trials", "3",
		"--bound", ktest.Slack.String(), "--remove-bound", (3 * ktest.Slack).String()}
	c := r.cmd(nil, argv...)
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	t0 := time.Now()
	err := c.Run()
	var rep hostcheck.ProveReport
	if jerr := json.Unmarshal(o.Bytes(), &rep); jerr != nil {
		t.Fatalf("prove-deathwatch: %v %v\n%s\n%s", err, jerr, o.String(), e.String())
	}
	ktest.CheckOutput(t, ktest.SchemaProve, o.Bytes())
	t.Logf("prove-deathwatch --runtime kubernetes (%v):\n%s", time.Since(t0).Round(time.Second), proveTable(rep))
	if err != nil || !rep.Pass || len(rep.Rows) != 8 { // four paths (controller, sigkill, heartbeat, deadline) × dead, removed
		t.Errorf("prove-deathwatch: %v, pass %v, %d rows\n%s", err, rep.Pass, len(rep.Rows), e.String())
	}
	if ps := r.k.Pods(t, shared.LabelInstance+"="+r.instance+".prove"); len(ps) != 0 {
		t.Errorf("pods left by the proof: %v", ps)
	}

	c = r.cmd(nil, "--instance", r.instance, "--journal", r.journal(), "doctor", "--runtime", "kubernetes", "--image", r.image,
		"--posture", "preferred", "--skip-proof")
	out, err := c.CombinedOutput()
	t.Logf("doctor --runtime kubernetes:\n%s", out)
	if err != nil || !strings.Contains(string(out), "kubernetes") || !strings.Contains(string(out), "v1.37.2") {
		t.Errorf("doctor: %v", err)
	}
}

// An image without a watcher: an init container copies it in from the
// watcher image (DEATHWATCH_K8S_WATCHER_IMAGE) into an emptyDir.
func TestKubernetesWatcherFromInitContainer(t *testing.T) {
	r := newK8sRig(t)
	c := r.cmd([]string{"DEATHWATCH_K8S_WATCHER_IMAGE=" + r.image},
		"--instance", r.instance, "--journal", r.journal(), "exec", "--runtime", "kubernetes",
		"--image", "localhost/deathwatch/busybox:1", "--", "sh", "-c", "echo pid1=$(cat /proc/1/cmdline | tr '\\0' ' '); exit 3")
	out, err := c.CombinedOutput()
	ee, _ := err.(*exec.ExitError)
	if ee == nil || ee.ExitCode() != 3 || !strings.Contains(string(out), "pid1=/dw/watcher --control=unix:"+kubernetes.ControlSocket+" --nonce=") {
		t.Errorf("exec: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	if ps := r.k.Pods(t, shared.LabelInstance+"="+r.instance); len(ps) != 0 {
		t.Errorf("pods left: %v", ps)
	}
}

// The minimal Role `supervisor kubernetes rbac` prints is enough: a
// service account bound to it alone runs exec, reconcile and doctor;
// without it, exec is refused with one line naming what RBAC denies.
func TestKubernetesMinimalRBAC(t *testing.T) {
	r := newK8sRig(t)
	sa := "dw-" + r.instance
	if _, err := r.k.Kubectl("create", "serviceaccount", sa); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.k.Kubectl("delete", "serviceaccount", sa, "--ignore-not-found")
		r.k.Kubectl("delete", "role,rolebinding", "deathwatch-supervisor", "--ignore-not-found")
	})
	tok, err := r.k.Kubectl("create", "token", sa, "--duration", "1h")
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(r.dir, "sa.kubeconfig")
	os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
current-context: sa
contexts:
- name: sa
  context: {cluster: c, user: sa, namespace: `+r.k.Namespace+`}
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:16443", certificate-authority: /var/lib/deathwatch-k8s/pki/ca.crt}
users:
- name: sa
  user: {token: "`+strings.TrimSpace(tok)+`"}
`), 0o600)
	asSA := []string{"KUBECONFIG=" + kc}

	// No Role yet: refused before anything exists, one line.
	c := r.cmd(asSA, r.execArgs("--", "true")...)
	out, err := c.CombinedOutput()
	if ee, _ := err.(*exec.ExitError); ee == nil || ee.ExitCode() != shared.ExitEngine || !strings.Contains(string(out), "RBAC denies") ||
		strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Errorf("exec without the Role: %v\n%s", err, out)
	}
	t.Logf("without the Role: %s", out)

	// The Role, as the command prints it.
	manifest, err := r.cmd(nil, "kubernetes", "rbac", "--namespace", r.k.Namespace, "--subject", sa).Output()
	if err != nil {
		t.Fatal(err)
	}
	// A Role of an earlier release grants pods/attach where boxes now
	// use pods/exec: refused, one line naming pods/exec, until the
	// printed Role is applied again.
	old := bytes.ReplaceAll(manifest, []byte("pods/exec"), []byte("pods/attach"))
	applyRole := func(m []byte) {
		apply := exec.Command(ktest.K8sKubectl, "--kubeconfig", r.k.Kubeconfig, "apply", "-f", "-")
		apply.Stdin = bytes.NewReader(m)
		if out, err := apply.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
	}
	applyRole(old)
	canI := func(sub string) bool {
		out, _ := exec.Command(ktest.K8sKubectl, "--kubeconfig", kc, "auth", "can-i", "create", "pods", "--subresource", sub).Output()
		return strings.TrimSpace(string(out)) == "yes"
	}
	if !ktest.WaitFor(30*time.Second, func() bool { return canI("attach") }) {
		t.Fatal("the old Role never took effect")
	}
	c = r.cmd(asSA, r.execArgs("--", "true")...)
	out, err = c.CombinedOutput()
	if ee, _ := err.(*exec.ExitError); ee == nil || ee.ExitCode() != shared.ExitEngine || !strings.Contains(string(out), "pods/exec") ||
		strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Errorf("exec with a Role that grants pods/attach: %v\n%s", err, out)
	}
	t.Logf("with a pods/attach Role: %s", out)
	applyRole(manifest)
	// RBAC takes effect at once in the authorizer's cache, give it a moment.
	if !ktest.WaitFor(30*time.Second, func() bool { return canI("exec") }) {
		t.Fatal("the Role never took effect")
	}
	c = r.cmd(asSA, r.execArgs("--", "sh", "-c", "echo as-sa; exit 4")...)
	out, err = c.CombinedOutput()
	if ee, _ := err.(*exec.ExitError); ee == nil || ee.ExitCode() != 4 || !strings.Contains(string(out), "as-sa") {
		t.Errorf("exec as the service account with the Role: %v\n%s", err, out)
	}
	c = r.cmd(asSA, "--instance", r.instance, "--journal", r.journal(), "reconcile")
	if out, err := c.CombinedOutput(); err != nil {
		t.Errorf("reconcile as the service account: %v\n%s", err, out)
	}
	c = r.cmd(asSA, "--instance", r.instance, "--journal", r.journal(), "doctor", "--runtime", "kubernetes", "--image", r.image, "--posture", "preferred", "--skip-proof")
	if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), "usable") {
		t.Errorf("doctor as the service account: %v\n%s", err, out)
	}
}

// TestKubernetesLargeWrites: a spec frame and stdin writes larger than
// one websocket frame (4 KiB) reach the watcher intact through the
// cluster's attach: a long command line (the spec with the syscall
// filter is then past 4 KiB) and 100,000 bytes of --stdin, counted by
// the agent.
func TestKubernetesLargeWrites(t *testing.T) {
	r := newK8sRig(t)
	script := "wc -c; : " + strings.Repeat("x", 10000)
	c := r.cmd(nil, r.execArgs("--stdin", "--", "sh", "-c", script)...)
	c.Stdin = bytes.NewReader(bytes.Repeat([]byte("y"), 100000))
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	if err := c.Run(); err != nil || strings.TrimSpace(o.String()) != "100000" {
		t.Fatalf("exec: %v, stdout %q (want 100000), stderr %q", err, o.String(), e.String())
	}
}

// TestEscapeKubernetesAPI: an agent in a kubernetes box looks for the
// cluster's API the ways a workload usually finds it, and finds none: no
// service-account token mounted, no KUBERNETES_* variables in its
// environment (the kubelet gives them to the container; the watcher must
// not pass them on), and no connection to the API server, the kubelet or
// the service address from inside the pod, at any address of this host.
// In the test cluster the pod network reaches only itself; on a real
// cluster the namespace's NetworkPolicy decides that reach (docs/runtimes/kubernetes.md), the
// token and the variables are ours to withhold everywhere.
func TestEscapeKubernetesAPI(t *testing.T) {
	r := newK8sRig(t)
	svc, err := r.k.Kubectl("get", "service", "kubernetes", "--namespace", "default", "-o", "jsonpath={.spec.clusterIP}:{.spec.ports[0].port}")
	if err != nil || svc == "" {
		t.Fatalf("the cluster's kubernetes service: %q, %v", svc, err)
	}
	targets := []string{svc, "127.0.0.1:16443", "127.0.0.1:10250"}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ip, ok := a.(*net.IPNet)
		if !ok || ip.IP.To4() == nil || ip.IP.IsLoopback() {
			continue
		}
		for _, port := range []string{"16443", "10250", "6443", "443"} {
			targets = append(targets, net.JoinHostPort(ip.IP.String(), port))
		}
	}
	script := `env | grep -q '^KUBERNETES_' && echo found-kubernetes-env
ls /var/run/secrets/kubernetes.io/serviceaccount/token /run/secrets/kubernetes.io/serviceaccount/token >/dev/null 2>&1 && echo found-token
for a in "$@"; do nc -w 2 "${a%:*}" "${a##*:}" </dev/null >/dev/null 2>&1 && echo "reached $a"; done
nc -l -p 7777 </dev/null >/dev/null 2>&1 & sleep 1
nc -w 2 127.0.0.1 7777 </dev/null >/dev/null 2>&1 && echo control-reached
echo looked`
	code, out, errOut := r.run(nil, append([]string{"--", "sh", "-c", script, "sh"}, targets...)...)
	if code != 0 || !strings.Contains(out, "looked") {
		t.Fatalf("the agent: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The control: the same nc reaches a listener the agent started on its
	// own loopback, so "not reached" above is the network's answer.
	if !strings.Contains(out, "control-reached") {
		t.Errorf("the agent's nc did not reach its own listener: the probe proves nothing\n%s", out)
	}
	for _, found := range []string{"found-kubernetes-env", "found-token", "reached "} {
		if strings.Contains(out, found) {
			t.Errorf("the agent %s:\n%s", found, out)
		}
	}
	t.Logf("tried %d addresses from the agent (%s …): none reached, no token, no KUBERNETES_* variable", len(targets), strings.Join(targets[:3], ", "))
}
