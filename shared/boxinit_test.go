package shared

import (
	"reflect"
	"testing"
)

func TestBoxInitRoundTrip(t *testing.T) {
	if _, err := ParseBoxInit(BoxInit{}.Marshal()); err != nil {
		t.Fatalf("empty settings: %v", err)
	}
	for _, c := range []BoxInit{
		{
			Root: "/img", RootFD: 7, Hostname: "dw-1", LoopbackUp: true, Exec: "/dev/.deathwatch/watcher",
			Argv: []string{"watcher", "--control=fd:3"}, Env: []string{"PATH=/bin", "GOMAXPROCS=1"}, Reexec: true,
			CgroupTasks: []string{"/sys/fs/cgroup/pids/x/tasks"}, CgroupTaskFDs: []int{6}, CgroupNSDone: true, CgroupMove: "/sys/fs/cgroup/x/agent/cgroup.procs", CgroupMoveFD: 7,
			Ops: []FsOp{
				{Op: "bind", Source: "/usr", Target: "/usr", ReadOnly: true, Mkdir: true, TreeFD: 8},
				{Op: "mount", Source: "tmpfs", Target: "/tmp", Flags: 6, Data: "mode=1777", Optional: true, Mode: 0o1777, Idmap: true},
			},
		},
	} {
		got, err := ParseBoxInit(c.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, c)
		}
	}
}

// A truncated, padded or oversized payload is an error, never a panic
// or a huge allocation.
func TestBoxInitRefusesBadPayloads(t *testing.T) {
	b := BoxInit{Root: "/r", Ops: []FsOp{{Op: "mkdir", Target: "/a"}}, Argv: []string{"watcher"}}.Marshal()
	for i := 0; i < len(b); i++ {
		if _, err := ParseBoxInit(b[:i]); err == nil {
			t.Errorf("%d of %d bytes parsed", i, len(b))
		}
	}
	if _, err := ParseBoxInit(append(b, 0)); err == nil {
		t.Error("a trailing byte parsed")
	}
	if _, err := ParseBoxInit([]byte{0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}); err == nil {
		t.Error("an op count beyond the payload parsed")
	}
	if _, err := ParseBoxInit([]byte{0, 0x80, 0x80, 0x80, 0x01}); err == nil {
		t.Error("a descriptor out of range parsed")
	}
}
