package native

import (
	"reflect"
	"strings"
	"syscall"
	"testing"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// The idmap namespaces: a --mount's owner onto the agent's host ids (the
// spec's uid:gid, the default when unset), the rootfs as the box maps.
func TestIdmapMaps(t *testing.T) {
	base := int64(IDRangeBase + 3*IDRangeSize)
	one := func(c, h int64) []syscall.SysProcIDMap {
		return []syscall.SysProcIDMap{{ContainerID: int(c), HostID: int(h), Size: 1}}
	}
	for _, c := range []struct {
		box        supervisor.Box
		key        idmapKey
		uids, gids []syscall.SysProcIDMap
	}{
		{supervisor.Box{}, idmapKey{uid: 0, gid: 0}, one(0, base+shared.DefaultAgentUID), one(0, base+shared.DefaultAgentGID)},
		{supervisor.Box{AgentUID: 2345, AgentGID: 3456}, idmapKey{uid: 1000, gid: 100}, one(1000, base+2345), one(100, base+3456)},
		{supervisor.Box{AgentUID: 2345, AgentGID: 3456}, idmapKey{rootfs: true},
			[]syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: IDRangeSize}},
			[]syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: IDRangeSize}}},
	} {
		uid, gid := agentIDs(&c.box)
		uids, gids := boxIDs{base: base, uid: uid, gid: gid}.maps(c.key)
		if !reflect.DeepEqual(uids, c.uids) || !reflect.DeepEqual(gids, c.gids) {
			t.Errorf("agent %d:%d, key %+v: maps %v %v, want %v %v", uid, gid, c.key, uids, gids, c.uids, c.gids)
		}
	}
}

// mountMapping: only the named account's own folder is mapped onto the
// agent; root's, or an unnamed account's, is bound as it is read-only
// and refused read-write (243).
func TestMountMapping(t *testing.T) {
	alice := &supervisor.HostIDs{UID: 1000, GID: 1000}
	for _, c := range []struct {
		name     string
		uid, gid uint32
		named    *supervisor.HostIDs
		readOnly bool
		idmap    bool
		refused  string // "" when accepted
	}{
		{"root's, read-only", 0, 0, nil, true, false, ""},
		{"root's, read-write", 0, 0, nil, false, false, "root's (host 0:0)"},
		{"root's, read-write, another named", 0, 0, alice, false, false, "root's"},
		{"root's group", 1000, 0, alice, false, false, "root's (host 1000:0)"},
		{"named account's", 1000, 1000, alice, false, true, ""},
		{"named account's, read-only", 1000, 1000, alice, true, true, ""},
		{"named uid, other group", 1000, 27, alice, false, false, "not the --mount-owner 1000:1000"},
		{"unnamed account's", 1000, 1000, nil, false, false, "no --mount-owner names"},
		{"unnamed account's, read-only", 1000, 1000, nil, true, false, ""},
		{"root named", 0, 0, &supervisor.HostIDs{}, false, false, "root's"},
	} {
		idmap, err := mountMapping("/src", c.uid, c.gid, c.named, c.readOnly)
		if idmap != c.idmap {
			t.Errorf("%s: idmap %v, want %v", c.name, idmap, c.idmap)
		}
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", c.name, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused) || exitcode.Of(err, 0) != shared.ExitRefused):
			t.Errorf("%s: %v, want a refusal (%d) that says %q", c.name, err, shared.ExitRefused, c.refused)
		}
	}
}

// Only idmapUserns's copy of the program is taken for the placeholder:
// its arguments and its marker, nothing else in its environment.
func TestNsinitCopy(t *testing.T) {
	args := []string{"supervisor", NsinitArg, nsinitHoldArg}
	for _, tc := range []struct {
		args, env []string
		want      bool
	}{
		{args, []string{nsinitMarker}, true},
		{args, nil, false},
		{args, []string{nsinitMarker, "HOME=/root"}, false},
		{[]string{"supervisor", NsinitArg}, []string{nsinitMarker}, false},
		{[]string{"controller", "exec"}, []string{nsinitMarker}, false},
	} {
		if got := nsinitCopy(tc.args, tc.env); got != tc.want {
			t.Errorf("nsinitCopy(%q, %q) = %v", tc.args, tc.env, got)
		}
	}
}

// A network the native runtime cannot give is a refusal (243), as on
// every runtime; one it gives plans.
func TestNsinitPlanNetworkCode(t *testing.T) {
	for _, tc := range []struct {
		network string
		code    int
	}{{"bridge", shared.ExitRefused}, {"none", 0}, {"", 0}} {
		_, err := nsinitPlan(&supervisor.Box{Network: tc.network}, "/", "/dw/watcher", false)
		if got := exitcode.Of(err, 0); got != tc.code {
			t.Errorf("--network %q: %v (code %d), want code %d", tc.network, err, got, tc.code)
		}
	}
}
