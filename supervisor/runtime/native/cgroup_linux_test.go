package native

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The v2 code path against a folder that stands in for the unified
// mount: the controllers are enabled down the path where they are not on
// yet, the box's limits written where the kernel would read them, the
// agent's and the watcher's folders made, and once the init has moved
// (finishV2) the agent's limit written below the box's. (The real
// hierarchy is exercised by kernel-tests/TestNativeCgroupV2.)
func TestCgroupV2Files(t *testing.T) {
	root := t.TempDir()
	box := filepath.Join(root, "deathwatch", "dw-1")
	if err := os.MkdirAll(box, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, text := range map[string]string{
		filepath.Join(root, "cgroup.subtree_control"):               "cpu memory pids", // on already: not written
		filepath.Join(root, "deathwatch", "cgroup.subtree_control"): "memory",
		filepath.Join(box, "memory.max"):                            "",
		filepath.Join(box, "memory.swap.max"):                       "",
		filepath.Join(box, "pids.max"):                              "",
		filepath.Join(box, "cgroup.procs"):                          "",
		filepath.Join(box, "cgroup.subtree_control"):                "",
	} {
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := boxCgroupSpec(2, root, "", "dw-1", 64<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := newBoxCgroup(s)
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	for f, want := range map[string]string{
		filepath.Join(root, "cgroup.subtree_control"):               "cpu memory pids",
		filepath.Join(root, "deathwatch", "cgroup.subtree_control"): "+pids",
		filepath.Join(box, "memory.max"):                            strconv.Itoa(64<<20 + WatcherMemoryReserve),
		filepath.Join(box, "memory.swap.max"):                       "0",
		filepath.Join(box, "pids.max"):                              "100",
		filepath.Join(box, "cgroup.subtree_control"):                "", // the init is still there
	} {
		if got := read(f); got != want {
			t.Errorf("%s = %q, want %q", strings.TrimPrefix(f, root), got, want)
		}
	}
	for _, d := range []string{WatcherGroup, AgentMemoryGroup} {
		if st, err := os.Stat(filepath.Join(box, d)); err != nil || !st.IsDir() {
			t.Errorf("no %s folder: %v", d, err)
		}
	}
	if err := cg.(*boxCgroupV2).finishV2(); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{
		filepath.Join(box, "cgroup.subtree_control"):            "+memory",
		filepath.Join(box, AgentMemoryGroup, "memory.max"):      "67108864",
		filepath.Join(box, AgentMemoryGroup, "memory.swap.max"): "0",
	} {
		if got := read(f); got != want {
			t.Errorf("after the init's move: %s = %q, want %q", strings.TrimPrefix(f, root), got, want)
		}
	}
	if got := cg.Paths(); len(got) != 1 || got[0] != box {
		t.Errorf("paths %v, want [%s]", got, box)
	}
	// Loading it back from the journaled state finds the same folder.
	back, ok, err := cgroupSpecFromState(s.state())
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if l, err := loadBoxCgroup(back); err != nil || l == nil || l.Paths()[0] != box {
		t.Fatalf("load: %v %v", l, err)
	}
	// Gone is not an error, and loads as nothing.
	os.RemoveAll(filepath.Join(root, "deathwatch"))
	if l, err := loadBoxCgroup(back); err != nil || l != nil {
		t.Fatalf("load of a removed cgroup: %v %v", l, err)
	}
}

// Each failed step of a v2 box cgroup says where and why, and none is
// dropped for a later one.
func TestCgroupStepErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{unix.EBUSY, "no-internal-process rule"},
		{unix.ENOENT, "not enabled in the folder above"},
		{unix.EACCES, "not delegated to this user"},
		{unix.EROFS, "read-only"},
	} {
		err := cgroupStep("enable +memory in /x/cgroup.subtree_control", &os.PathError{Op: "write", Path: "/x", Err: c.err})
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "enable +memory in /x") || !errors.Is(err, c.err) {
			t.Errorf("%v: %v", c.err, err)
		}
	}
	// Two refused folders: both errors are kept.
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "a"), 0o755)
	errs := enableControllers(filepath.Join(root, "missing"), "/a", []string{"memory"})
	if len(errs) != 2 {
		t.Errorf("errors %v, want one for each of the two folders", errs)
	}
}

func TestCheckCgroupWritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes anywhere: the refusal needs an unprivileged user (kernel-tests/TestNativeRefusals covers it as dwtest)")
	}
	root := t.TempDir()
	os.Chmod(root, 0o555)
	defer os.Chmod(root, 0o755)
	err := checkCgroupWritable(cgroupSpec{Version: 2, Root: root, Group: "/deathwatch/x"})
	if err == nil || !strings.Contains(err.Error(), "cgroup not writable") {
		t.Fatalf("err %v", err)
	}
}

func TestCheckOwnCgroup(t *testing.T) {
	n := New(nil, Options{StateDir: t.TempDir(), IDRangeDir: t.TempDir()})
	for _, c := range []struct {
		spec cgroupSpec
		ok   bool
	}{
		{cgroupSpec{Version: 1, Root: "/sys/fs/cgroup", Group: "/deathwatch/dw-a"}, true},
		{cgroupSpec{Version: 2, Root: "/sys/fs/cgroup/unified", Group: "/deathwatch/dw-a"}, true},
		{cgroupSpec{Version: 1, Root: "/sys/fs/cgroup", Group: "/deathwatch/dw-b"}, false},   // another box's
		{cgroupSpec{Version: 1, Root: "/sys/fs/cgroup", Group: "/system.slice"}, false},      // the host's
		{cgroupSpec{Version: 1, Root: "/tmp/fake", Group: "/deathwatch/dw-a"}, false},        // not a cgroup mount
		{cgroupSpec{Version: 1, Root: "/sys/fs/cgroup", Group: "/deathwatch/dw-a/x"}, false}, // below it
	} {
		if err := n.checkOwnCgroup(c.spec, "dw-a"); (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok=%v", c.spec, err, c.ok)
		}
	}
}

// The v1 code path against folders that stand in for the hierarchies:
// a folder per controller, the limits written where the kernel would
// read them (swap held at the memory limit where swap is accounted),
// and the processes of the box and its children listed once.
func TestCgroupV1Files(t *testing.T) {
	root := t.TempDir()
	for _, c := range v1Controllers {
		if err := os.MkdirAll(filepath.Join(root, c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "memory", "memory.memsw.limit_in_bytes"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := boxCgroupSpec(1, root, "", "dw-1", 64<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := newBoxCgroup(s)
	if err != nil {
		t.Fatal(err)
	}
	box := func(c string) string { return filepath.Join(root, c, "deathwatch", "dw-1") }
	// The agent's memory cgroup holds the limit; the box's, with the
	// watcher in it, the limit and the watcher's reserve.
	agent := filepath.Join(box("memory"), AgentMemoryGroup)
	for f, want := range map[string]string{
		filepath.Join(box("memory"), "memory.limit_in_bytes"):       strconv.Itoa(64<<20 + WatcherMemoryReserve),
		filepath.Join(box("memory"), "memory.memsw.limit_in_bytes"): strconv.Itoa(64<<20 + WatcherMemoryReserve),
		filepath.Join(agent, "memory.limit_in_bytes"):               "67108864",
		filepath.Join(agent, "memory.memsw.limit_in_bytes"):         "67108864",
		filepath.Join(box("pids"), "pids.max"):                      "100",
	} {
		if b, err := os.ReadFile(f); err != nil || string(b) != want {
			t.Errorf("%s = %q (%v), want %q", strings.TrimPrefix(f, root), b, err, want)
		}
	}
	if st, err := os.Stat(box("freezer")); err != nil || !st.IsDir() {
		t.Errorf("no freezer folder: %v", err)
	}
	os.MkdirAll(filepath.Join(box("pids"), "child"), 0o755)
	os.WriteFile(filepath.Join(box("pids"), "cgroup.procs"), []byte("10\n11\n"), 0o644)
	os.WriteFile(filepath.Join(box("pids"), "child", "cgroup.procs"), []byte("12\n"), 0o644)
	os.WriteFile(filepath.Join(box("memory"), "cgroup.procs"), []byte("10\n"), 0o644)
	if ps, err := cg.Procs(); err != nil || !reflect.DeepEqual(ps, []int{10, 11, 12}) {
		t.Errorf("procs %v, %v; want 10, 11, 12 once each", ps, err)
	}
	if got := cg.Paths(); len(got) != 3 || got[0] != box("memory") {
		t.Errorf("paths %v", got)
	}
	if s.agentTasksV1() != filepath.Join(agent, "tasks") {
		t.Errorf("agent tasks file %s, want it in %s", s.agentTasksV1(), agent)
	}
	// Without a memory limit there is no agent cgroup.
	s2, _ := boxCgroupSpec(1, root, "", "dw-2", 0, 100)
	if _, err := newBoxCgroup(s2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "memory", "deathwatch", "dw-2", AgentMemoryGroup)); !os.IsNotExist(err) {
		t.Errorf("a box without --memory has an agent memory cgroup (%v)", err)
	}
}

// TestCgroupKillSparesSelf: a box cgroup that lists this process (a
// thread of it is in the cgroup) is neither frozen nor killed: the
// freeze would stop the freezing thread itself and the kill would end
// the supervisor. Without the check this test's process is SIGKILLed.
func TestCgroupKillSparesSelf(t *testing.T) {
	root := t.TempDir()
	self := []byte(strconv.Itoa(os.Getpid()) + "\n")
	for _, n := range v1Controllers {
		d := filepath.Join(root, n, "deathwatch", "dw-1")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), self, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(root, "freezer", "deathwatch", "dw-1", "freezer.state")
	os.WriteFile(state, []byte("THAWED"), 0o644)
	v2 := filepath.Join(root, "unified", "deathwatch", "dw-1")
	os.MkdirAll(v2, 0o755)
	os.WriteFile(filepath.Join(v2, "cgroup.procs"), self, 0o644)
	for _, cg := range []boxCgroup{
		&boxCgroupV1{spec: cgroupSpec{Version: 1, Root: root, Group: "/deathwatch/dw-1"}},
		&boxCgroupV2{spec: cgroupSpec{Version: 2, Root: filepath.Join(root, "unified"), Group: "/deathwatch/dw-1"}},
	} {
		err := cg.Kill()
		if err == nil || !strings.Contains(err.Error(), "a thread of this supervisor") {
			t.Errorf("%v: Kill of a cgroup that lists this process: %v, want a refusal", cg.Paths(), err)
		}
		if err := killAndDelete(cg, time.Second); err == nil {
			t.Errorf("%v: killAndDelete of a cgroup that lists this process succeeded", cg.Paths())
		}
	}
	if b, _ := os.ReadFile(state); string(b) != "THAWED" {
		t.Errorf("freezer.state %q: the box was frozen", b)
	}
	if _, err := os.Stat(filepath.Join(v2, "cgroup.kill")); err == nil {
		t.Errorf("cgroup.kill written")
	}
}
