package kerneltests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor/proc"
)

// TestEscapeEngineIDs (breaches 3 and 4): rootful Docker without
// userns-remap ran every box's agent as host uid 1000, a host account
// (a real login here), shared by every Docker box: that account read a
// box's secret from /proc/PID/environ, and one box's agent could signal
// another's. Rootless Podman ran all of a user's boxes on the same ids,
// and so did rootless Docker (uid 1000 of the daemon's namespace, host
// uid 166535 here, in every box, with no warning line).
// Now, played from the host with the agent's own host ids: no agent runs
// as an account of the host or owns a host process outside its box, two
// live boxes share no host id, and one box's ids can neither signal nor
// read the other box's agent. A rootless Podman whose user has
// subordinate ids for one box only says so in one warning line (its
// boxes then share ids; the test machine's user has 65536).
func TestEscapeEngineIDs(t *testing.T) {
	esc := ktest.ToolPath(t, "escape")
	const secret = "ENGINE-BOX-SECRET-29"
	for i, proto := range rigs(t, "docker", "podman", "podman-rootless", "docker-rootless") {
		r := *proto
		t.Run(r.Name, func(t *testing.T) {
			r.setup(t)
			accounts := hostAccounts(t)
			type box struct {
				cmd   *exec.Cmd
				out   bytes.Buffer
				argv  string
				agent int
				ended chan struct{}
			}
			var boxes [2]*box
			for j := range boxes {
				// A sleep no other test starts: the agent is found by its argv.
				b := &box{argv: fmt.Sprintf("sleep %d", 7000+(os.Getpid()%500)*8+i*2+j)}
				b.cmd = r.supervisor([]string{"DW_SECRET=" + secret}, "--env", "DW_SECRET", "--", "sh", "-c", "exec "+b.argv)
				b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.out
				if err := b.cmd.Start(); err != nil {
					t.Fatal(err)
				}
				b.ended = make(chan struct{})
				go func() { b.cmd.Wait(); close(b.ended) }()
				t.Cleanup(func() { b.cmd.Process.Kill(); <-b.ended })
				boxes[j] = b
			}
			for _, b := range boxes {
				ok := ktest.WaitFor(60*time.Second, func() bool {
					select {
					case <-b.ended:
						t.Fatalf("the supervisor ended before its agent ran: %s", b.out.String())
					default:
					}
					for _, p := range ktest.Descendants(1) {
						if strings.Join(ktest.Cmdline(p.PID), " ") == b.argv {
							b.agent = p.PID
							return true
						}
					}
					return false
				})
				if !ok {
					t.Fatalf("no %q process: %s", b.argv, b.out.String())
				}
			}
			a, b := boxes[0], boxes[1]
			idsA, idsB := hostIDsOf(t, a.agent), hostIDsOf(t, b.agent)
			t.Logf("agent A pid %d host ids %v; agent B pid %d host ids %v", a.agent, idsA, b.agent, idsB)
			for _, x := range boxes {
				for _, id := range hostIDsOf(t, x.agent) {
					if who, ok := accounts[id]; ok {
						t.Errorf("agent pid %d runs as host id %d, the host's account %s", x.agent, id, who)
						break
					}
				}
			}
			shared := false
			for _, x := range idsA {
				for _, y := range idsB {
					shared = shared || x == y
				}
			}
			if shared {
				warned := strings.Contains(a.out.String(), "supervisor: warning: rootless podman: this user's subordinate ids")
				if r.Name != "podman-rootless" || !warned {
					t.Errorf("the agents of two live %s boxes share host ids (%v, %v) with no warning line:\n%s", r.Name, idsA, idsB, a.out.String())
				}
				t.Logf("shared ids, said: %v", warned)
				return
			}
			// No host process but the agent's own has its uid.
			for _, x := range boxes {
				uid := strconv.Itoa(hostIDsOf(t, x.agent)[0])
				for _, pid := range proc.PIDs() {
					if pid == x.agent {
						continue
					}
					if v, err := ktest.StatusField(pid, "Uid"); err == nil && strings.Fields(v)[0] == uid {
						t.Errorf("host process %d (%q) has the uid %s of agent pid %d", pid, strings.Join(ktest.Cmdline(pid), " "), uid, x.agent)
					}
				}
			}
			// As box A's agent's host ids: signal and read box B's agent.
			p := strconv.Itoa(b.agent)
			out, _ := exec.Command("setpriv", "--reuid", strconv.Itoa(idsA[0]), "--regid", strconv.Itoa(idsA[4]), "--clear-groups",
				esc, "kill", p).CombinedOutput()
			read, _ := exec.Command("setpriv", "--reuid", strconv.Itoa(idsA[0]), "--regid", strconv.Itoa(idsA[4]), "--clear-groups",
				esc, "read", "/proc/"+p+"/environ").CombinedOutput()
			got := lines(string(out) + string(read))
			t.Logf("as A's agent's host ids:\n%s%s", out, read)
			if got["kill:"+p] != "EPERM" {
				t.Errorf("box A's agent's host ids signalling box B's agent: %q, want EPERM", got["kill:"+p])
			}
			if v := got["read:/proc/"+p+"/environ"]; v != "EACCES" || strings.Contains(string(read), secret) {
				t.Errorf("box A's agent's host ids reading box B's agent's environ: %q, want EACCES", v)
			}
		})
	}
}
