package kerneltests

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// TestEscapeSlotOfDyingBox (issue 29, ids): rootful Docker runs each
// box on host ids of a slot of its own, held by a lock file that named
// the supervisor and no init. A box whose supervisor was SIGKILLed is
// still there until its watcher sees the stream's end and ends it; a
// box launched meanwhile took the slot back (its supervisor was gone)
// and ran its agent on the ids of the box still alive, which could then
// signal it and read its /proc. Played with a box that cannot die:
// its watcher is stopped (SIGSTOP from the host) before its supervisor
// is killed. Now the slot names the box's init, and the next box gets
// other ids while that init lives.
func TestEscapeSlotOfDyingBox(t *testing.T) {
	r := rigs(t, "docker")[0]
	r.setup(t)
	run := r.start(r.Instance, nil, "--", "sh", "-c", `echo uid=$(id -u); exec sleep 1003`)
	defer run.end()
	box, uid := run.agentStarted(t)
	out, err := r.Engine("container", "inspect", "--format", "{{.State.Pid}}", box).Output()
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		t.Fatalf("no PID 1 for box %s: %q %v", box, out, err)
	}
	// The box cannot end while its watcher is stopped; it ends once it
	// runs again and sees the stream's end.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Kill(pid, syscall.SIGCONT)
		if !ktest.WaitFor(60*time.Second, func() bool { return !r.exists(box) }) {
			t.Errorf("the first box %s outlived its watcher's return", box)
		}
		if code, rep, stderr := r.reconcile(r.Instance); code != 0 {
			t.Errorf("reconcile: exit %d %+v %s", code, rep, stderr)
		}
	}()
	run.kill()

	res := runCmd(r.supervisor(nil, "--", "sh", "-c", "echo uid=$(id -u)"))
	second := lines(res.stdout)["uid"]
	t.Logf("first box %s agent uid %s (still there: %v); second box: exit %d, agent uid %s\n%s", box, uid, r.exists(box), res.code, second, res.stderr)
	if res.code != 0 || second == "" {
		t.Fatalf("the second box: exit %d, stdout %q", res.code, res.stdout)
	}
	if !r.exists(box) {
		t.Fatalf("the first box %s ended while its watcher was stopped: the test proves nothing", box)
	}
	if second == uid {
		t.Errorf("the second box's agent ran as host uid %s, the ids of box %s, still alive", second, box)
	}
}
