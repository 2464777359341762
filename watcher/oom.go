package watcher

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"deathwatch/shared"
)

// agentOOMScore is the agent's oom_score_adj: the most preferred victim,
// as Kubernetes makes a best-effort pod. Whatever fills the box's memory
// (even a tmpfs, whose pages no process's RSS shows), the kernel kills
// an agent process before the watcher.
const agentOOMScore = 1000

// withOOMScore runs start (the fork of the agent) with the watcher's
// oom_score_adj raised to score, so that the agent inherits it from the
// fork on, then puts the watcher's own back. The value is the whole
// process's, and setting it on the agent's pid after the fork would
// leave the agent a moment at the watcher's score; neither raising nor
// lowering back to the watcher's value needs a privilege (the kernel
// refuses only going below oom_score_adj_min). Without /proc the agent
// keeps the watcher's score and the watcher says so.
//
// An agent may lower its score again, down to the floor it inherited;
// one that then fills a tmpfs would still make the watcher the victim,
// which only a memory cgroup of the agent's own closes.
func withOOMScore(score int, start func()) {
	old, err := readOOMScoreAdj()
	if err == nil {
		err = writeOOMScoreAdj([]byte(strconv.Itoa(score)))
	}
	if err != nil {
		logf("the agent keeps the watcher's oom_score_adj: " + err.Error())
		start()
		return
	}
	start()
	if err := writeOOMScoreAdj(old); err != nil {
		logf("restore the watcher's oom_score_adj: " + err.Error())
	}
}

const oomScoreAdjFile = "/proc/self/oom_score_adj"

// oomScoreAdjFD is /proc/self/oom_score_adj held open (holdOOMScoreAdj),
// or -1: the file is then opened at each use.
var oomScoreAdjFD = -1

// holdOOMScoreAdj opens /proc/self/oom_score_adj for good, for a
// watcher that is about to make itself not dumpable (its /proc files
// are root's from then on, but an open descriptor stays usable). A
// failure leaves the file to be opened at each use, and said there.
func holdOOMScoreAdj() {
	if fd, err := syscall.Open(oomScoreAdjFile, syscall.O_RDWR|syscall.O_CLOEXEC, 0); err == nil {
		oomScoreAdjFD = fd
	}
}

func readOOMScoreAdj() ([]byte, error) {
	if oomScoreAdjFD < 0 {
		return readFile(oomScoreAdjFile)
	}
	var b [16]byte
	n, err := syscall.Pread(oomScoreAdjFD, b[:], 0)
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: oomScoreAdjFile, Err: err}
	}
	return b[:n], nil
}

func writeOOMScoreAdj(b []byte) error {
	if oomScoreAdjFD < 0 {
		return writeFile(oomScoreAdjFile, b)
	}
	if _, err := syscall.Pwrite(oomScoreAdjFD, b, 0); err != nil {
		return &os.PathError{Op: "write", Path: oomScoreAdjFile, Err: err}
	}
	return nil
}

// oomCounter reads the number of OOM kills in the box's memory cgroup
// (the watcher's own, which holds the agent's processes): oom_kill in
// memory.events on cgroup v2, in memory.oom_control on v1. A box that
// does not show its cgroup (the native runtime mounts no cgroup file
// system) counts the kernel's, oom_kill in /proc/vmstat: an agent
// SIGKILLed while another OOM kill happened on the host is then also
// reported as one.
type oomCounter struct {
	file string
	base uint64
}

// newOOMCounter notes the count before the agent starts; nil when no
// counter can be read (no OOM is then reported).
func newOOMCounter() *oomCounter {
	var files []string
	if b, err := readFile("/proc/self/cgroup"); err == nil {
		if f := memoryEventsFile(string(b)); f != "" {
			files = append(files, f)
		}
	}
	for _, f := range append(files, "/proc/vmstat") {
		c := &oomCounter{file: f}
		if n, ok := c.read(); ok {
			c.base = n
			return c
		}
	}
	return nil
}

// memoryEventsFile is the file holding oom_kill for the memory cgroup
// named by the contents of /proc/self/cgroup.
func memoryEventsFile(procCgroup string) string {
	dir, v1 := cgroupDir(procCgroup, "memory")
	switch {
	case dir == "":
		return ""
	case v1:
		return strings.TrimSuffix(dir, "/") + "/memory.oom_control"
	}
	return strings.TrimSuffix(dir, "/") + "/memory.events"
}

func (c *oomCounter) read() (uint64, bool) {
	b, err := readFile(c.file)
	if err != nil {
		return 0, false
	}
	return oomKills(string(b))
}

// oomKills finds "oom_kill N" in memory.events or memory.oom_control.
func oomKills(text string) (uint64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// killed reports whether the kernel's OOM killer struck in the box
// since the agent started. The counter moves right after the victim's
// SIGKILL is sent, which can be a moment after its parent reaps it, so
// an unchanged counter is read once more.
func (c *oomCounter) killed() bool {
	if c == nil {
		return false
	}
	for i := 0; i < 2; i++ {
		if n, ok := c.read(); ok && n > c.base {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// endReason is why an agent that ended by itself (status ws) ended: an
// OOM kill when its status is 137 (it died of SIGKILL, or it is a shell
// whose command did) and the box counted an OOM kill while it ran. The
// status stays 137: the reason tells an OOM kill from any other.
func (w *watcher) endReason(ws syscall.WaitStatus) shared.Reason {
	killed := (ws.Signaled() && ws.Signal() == syscall.SIGKILL) ||
		(ws.Exited() && ws.ExitStatus() == shared.SignalStatus(int(syscall.SIGKILL)))
	switch {
	case killed && w.oom.killed():
		return shared.ReasonOOM
	case ws.Signaled():
		return shared.ReasonSignaled
	}
	return shared.ReasonExited
}
