package kerneltests

import (
	"deathwatch/supervisor/supervisortest"
	"net"
	"strings"
	"testing"
)

// hostAddress is a non-loopback IPv4 address of this host, the one its
// default route leaves from (no packet is sent).
func hostAddress(t *testing.T) string {
	t.Helper()
	c, err := net.Dial("udp4", "192.0.2.1:9")
	if err != nil {
		t.Fatalf("find the host's address: %v", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

// TestEscapeBridgeReach (issue 29, weak spot): with --network bridge on
// the engines the agent reached every host service listening on a
// non-loopback address, and nothing said so. It still does (that is
// what a bridge is), and the supervisor now says it in one warning
// line; --network none reaches nothing and says nothing.
func TestEscapeBridgeReach(t *testing.T) {
	l := listenOn(t, "tcp4", "0.0.0.0:0")
	addr := hostAddress(t) + " " + strings.TrimPrefix(l.Addr().String(), "0.0.0.0:")
	forEngine(t, func(t *testing.T, r *rig) {
		for _, network := range []string{"bridge", "none"} {
			res := runCmd(r.supervisor(nil, "--network", network, "--", "sh", "-c", `nc -w 3 `+addr+` </dev/null && echo reached || echo unreached`))
			t.Logf("--network %s: exit %d %s%s", network, res.code, res.stdout, res.stderr)
			reached := strings.Contains(res.stdout, "reached") && !strings.Contains(res.stdout, "unreached")
			warned := strings.Count(res.stderr, "supervisor: "+supervisortest.BridgeNetworkWarning+"\n")
			switch {
			case network == "bridge" && (!reached || warned != 1):
				t.Errorf("--network bridge: the agent reached %s: %v, the warning %d times; want it reached and said once", addr, reached, warned)
			case network == "none" && (reached || warned != 0):
				t.Errorf("--network none: the agent reached %s: %v, warnings %d; want neither", addr, reached, warned)
			}
		}
	})
}
