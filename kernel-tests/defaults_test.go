package kerneltests

// Safe by default (issue 17): supervisor exec with no bound flags bounds
// every box — a frozen supervisor's box dies within the default
// heartbeat, a short stop does not kill a healthy box, and turning the
// bounds off is said out loud.

import (
	"deathwatch/supervisor/journal"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor"
	"deathwatch/supervisor/hostcheck"
)

// shortStop is well under the default heartbeat even with the ping
// period on top (pings go every third of it) and a busy host's delay.
const shortStop = 3 * time.Second

func TestDefaultBounds(t *testing.T) {
	for _, proto := range rigs(t) {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)

			// A stop shorter than the heartbeat: the box lives on and its
			// agent finishes normally.
			run := r.start(r.Instance, nil, "--", "sh", "-c", "echo armed; sleep 8; echo finished")
			if !run.waitFor(60*time.Second, func() bool { return strings.Contains(run.stdout(), "armed") }) {
				run.kill()
				t.Fatalf("the agent did not start: %s", run.stdout())
			}
			run.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(shortStop)
			run.cmd.Process.Signal(syscall.SIGCONT)
			select {
			case <-run.done:
			case <-time.After(60 * time.Second):
				run.kill()
				t.Fatalf("the agent did not finish after a %v stop", shortStop)
			}
			if code := run.cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(run.stdout(), "finished") {
				t.Fatalf("after a %v stop of the supervisor (default heartbeat %v): exit %d, output %q", shortStop, supervisor.DefaultHeartbeat, code, run.stdout())
			}
			t.Logf("a %v stop of the supervisor: the agent finished, exit 0", shortStop)

			// A stop for good: the box dies within the default heartbeat
			// (plus slack), and reconcile removes what is left.
			run = r.start(r.Instance, nil, "--", "sh", "-c", cwAgent)
			if !run.waitFor(60*time.Second, func() bool { return strings.Contains(run.stdout(), "armed") && run.event(supervisor.EventReady) != nil }) {
				run.kill()
				t.Fatalf("the agent did not start: %s", run.stdout())
			}
			box := run.event(supervisor.EventReady).Box
			var entry *journal.Entry
			for _, e := range r.entries(r.Instance) {
				if e.Box == box {
					entry = e
				}
			}
			procs := r.boxProcs(box, entry)
			if len(procs) < 4 {
				run.kill()
				t.Fatalf("saw %d processes of box %s, want the watcher, the agent and its two descendants", len(procs), box)
			}
			run.cmd.Process.Signal(syscall.SIGSTOP)
			stopped := time.Now()
			took, left := ktest.WaitDead(procs, stopped, supervisor.DefaultHeartbeat+ktest.Slack)
			run.kill()
			if len(left) > 0 {
				t.Fatalf("%s still alive %v after the supervisor froze (default heartbeat %v)", ktest.Describe(left), took.Round(time.Millisecond), supervisor.DefaultHeartbeat)
			}
			t.Logf("supervisor frozen → every box process dead after %v (default heartbeat %v)", took.Round(time.Millisecond), supervisor.DefaultHeartbeat)
			if took < supervisor.DefaultHeartbeat-supervisor.DefaultHeartbeat/3-time.Second {
				t.Errorf("the box died %v after the freeze: before the %v heartbeat could pass", took, supervisor.DefaultHeartbeat)
			}
			code, rep, stderr := r.reconcile(r.Instance)
			if code != 0 {
				t.Errorf("reconcile: exit %d %+v\n%s", code, rep, stderr)
			}
			if r.exists(box) {
				t.Errorf("box %s still there after reconcile", box)
			}
			for _, e := range r.entries(r.Instance) {
				if e.Open() {
					t.Errorf("journal entry %s open (%s)", e.LaunchID, e.State)
				}
			}
		})
	}
}

// Turning both bounds off keeps the old behaviour and says so; doctor's
// required posture refuses it and states the bound a controller gets.
func TestDefaultBoundsOff(t *testing.T) {
	r := rigs(t, "native")[0]
	r.setup(t)
	res := runCmd(r.exec(nil, r.Instance, r.Dir+"/events.jsonl", "--heartbeat", "0", "--deadline", "0", "--", "true"))
	if res.code != 0 || !strings.Contains(res.stderr, "warning: --heartbeat 0 and --deadline 0") {
		t.Errorf("--heartbeat 0 --deadline 0: exit %d, stderr %q", res.code, res.stderr)
	}
	res = runCmd(r.exec(nil, r.Instance, r.Dir+"/events.jsonl", "--", "true"))
	if res.code != 0 || strings.Contains(res.stderr, "warning") {
		t.Errorf("defaults: exit %d, stderr %q", res.code, res.stderr)
	}

	code, rep, _ := r.doctor("--runtime", "native", "--skip-proof", "--posture", "required", "--heartbeat", "0", "--deadline", "0")
	t.Logf("doctor --heartbeat 0 --deadline 0:\n%s", doctorTable(rep))
	if code == 0 || rep.OK || !hasProblem(rep, "no bound") || !strings.Contains(rep.BoundText, "live for ever") ||
		rep.Bound.Frozen != hostcheck.FrozenNever || rep.Bound.FailedWithinNS != 0 {
		t.Errorf("doctor with no bound: exit %d ok %v bound %q %+v problems %v", code, rep.OK, rep.BoundText, rep.Bound, rep.Problems)
	}
	_, rep, _ = r.doctor("--runtime", "native", "--skip-proof", "--posture", "required")
	b := rep.Bound
	if hasProblem(rep, "no bound") || !strings.Contains(rep.BoundText, "a frozen controller's boxes die within 10s + ") || !strings.Contains(rep.BoundText, "a failed watch ends at 1h0m0s + 2s") ||
		b.Frozen != hostcheck.FrozenHeartbeat || time.Duration(b.HeartbeatNS) != 10*time.Second || b.SlackNS <= 0 || b.FrozenWithinNS != b.HeartbeatNS+b.SlackNS ||
		time.Duration(b.FailedWithinNS) != time.Hour+2*time.Second {
		t.Errorf("doctor with the defaults: bound %q %+v problems %v", rep.BoundText, b, rep.Problems)
	}
}

func hasProblem(rep hostcheck.DoctorReport, s string) bool {
	for _, p := range rep.Problems {
		if strings.Contains(p, s) {
			return true
		}
	}
	return false
}
