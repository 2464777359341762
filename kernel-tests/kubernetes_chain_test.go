package kerneltests

// The controller chain (controller_chain_test.go) on the kubernetes
// runtime: a Go and a Python controller start `supervisor exec
// --runtime kubernetes` children on the test cluster and are SIGKILLed,
// or stop reading their output.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// startChain starts a controller (lang go or python) in mode with n
// supervisors of the rig running supArgs (after execArgs), as root with
// the cluster's environment, and returns it (the test reads its lines
// with until).
func (r *k8sRig) startChain(t *testing.T, lang, mode string, n int, marker string, supArgs ...string) *chain {
	t.Helper()
	sup := append([]string{r.bin.Supervisor}, r.execArgs(supArgs...)...)
	command := func(name string, args ...string) *exec.Cmd { return ktest.CommandAs("", r.k.Env(), name, args...) }
	return runChain(t, chainController(t, lang, mode, n, r.dir, command, sup), marker, r.dir, func() { r.reconcile() })
}

// pods lists the pods of the rig's instance.
func (r *k8sRig) pods() []string { return r.k.Pods(r.t, shared.LabelInstance+"="+r.instance) }

// TestKubernetesChainControllerKilled: a Go and a Python controller
// start 2 kubernetes boxes each, wait until all are ready, and are
// SIGKILLed: no supervisor and no agent survives, every pod leaves the
// API, and reconcile at the controller's restart finds nothing blocked.
func TestKubernetesChainControllerKilled(t *testing.T) {
	const n = 2
	for _, lang := range []string{"go", "python"} {
		t.Run(lang, func(t *testing.T) {
			r := newK8sRig(t)
			marker := chainMarker("k8s" + lang)
			ctl := r.startChain(t, lang, "main", n, marker, chainAgent(marker, false)...)
			ctl.until("ready")
			if got := r.pods(); len(got) != n {
				t.Fatalf("pods of the instance %v; want %d", got, n)
			}
			ps := ctl.procs(2 * n)
			var sups []ktest.Proc
			for _, p := range ps {
				for _, pid := range ctl.started {
					if p.PID == pid {
						sups = append(sups, p)
					}
				}
			}
			if len(sups) != n {
				t.Fatalf("%d of the controller's supervisors %v among %s; want %d", len(sups), ctl.started, ktest.Describe(ps), n)
			}
			at := ctl.kill()
			supsDead := chainDead(t, sups, at, "after SIGKILL of the controller, the supervisors")
			allDead := chainDead(t, ps, at, "after SIGKILL of the controller, the supervisors and agents")
			var left []string
			if !ktest.WaitFor(chainCeiling, func() bool { left = r.pods(); return len(left) == 0 }) {
				t.Fatalf("pods %v left %v after the controller's death", left, chainCeiling)
			}
			podsGone := time.Since(at)
			t.Logf("kubernetes/%s: controller SIGKILL → %d supervisors dead %v, → last of %d supervisors and agents dead %v, → %d pods gone %v",
				lang, n, supsDead.Round(time.Millisecond), len(ps), allDead.Round(time.Millisecond), n, podsGone.Round(time.Millisecond))
			code, rep := r.reconcile()
			if code != 0 || len(rep.Blocked) != 0 {
				t.Fatalf("reconcile at restart: exit %d, blocked %+v", code, rep.Blocked)
			}
		})
	}
}

// TestKubernetesChainEPIPE: a controller closes its read end of the
// supervisor's stdout while the agent prints: the box ends, its pod is
// removed, and the exit says why (249, output-lost).
func TestKubernetesChainEPIPE(t *testing.T) {
	r := newK8sRig(t)
	marker := chainMarker("k8sepipe")
	events := filepath.Join(r.dir, "events")
	ctl := r.startChain(t, "go", "epipe", 1, marker, append([]string{"--events", events}, chainAgent(marker, true)...)...)
	ctl.until("ready")
	at := time.Now()
	exit := ctl.until("exit ")
	t.Logf("kubernetes: controller closed the pipe → supervisor exited %v", time.Since(at).Round(time.Millisecond))
	// The supervisor removed the box before it exited.
	if procs := ctl.marked(); len(procs) > 0 {
		t.Errorf("after the supervisor's exit %s still run", ktest.Describe(procs))
	}
	var left []string
	if !ktest.WaitFor(chainCeiling, func() bool { left = r.pods(); return len(left) == 0 }) {
		t.Errorf("pods %v left %v after the supervisor's exit", left, chainCeiling)
	}
	if exit != fmt.Sprintf("exit %d", shared.ExitControllerLost) {
		b, _ := os.ReadFile(ctl.stderr)
		t.Fatalf("supervisor %s, want exit %d (controller lost); stderr:\n%s", exit, shared.ExitControllerLost, b)
	}
	if reason := exitedReason(t, events); reason != string(shared.ReasonOutputLost) {
		t.Errorf("exited event reason %q, want %s", reason, shared.ReasonOutputLost)
	}
}
