package native

import (
	"reflect"
	"syscall"
	"testing"

	"deathwatch/shared"
	"deathwatch/supervisor"
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
