package watcher

import "testing"

func TestMemoryEventsFile(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"0::/box\n", "/sys/fs/cgroup/box/memory.events"},
		{"0::/\n", "/sys/fs/cgroup/memory.events"},
		{"12:pids:/b\n5:memory:/dw/box\n0::/\n", "/sys/fs/cgroup/memory/dw/box/memory.oom_control"},
		{"4:memory,hugetlb:/\n", "/sys/fs/cgroup/memory/memory.oom_control"},
		{"3:cpu:/x\n", ""},
	} {
		if got := memoryEventsFile(c.in); got != c.want {
			t.Errorf("memoryEventsFile(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestOOMKills(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n", 2, true},
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 7\n", 7, true},
		{"nr_free_pages 1\noom_kill 11\n", 11, true},
		{"oom 1\n", 0, false},
	} {
		n, ok := oomKills(c.in)
		if n != c.want || ok != c.ok {
			t.Errorf("oomKills(%q) = %d, %v; want %d, %v", c.in, n, ok, c.want, c.ok)
		}
	}
}
