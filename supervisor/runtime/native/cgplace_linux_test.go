package native

import (
	"strings"
	"testing"
)

// fakeTree is a v2 hierarchy as the parent's search reads it: the
// folders this user may write, and those that hold processes.
type fakeTree struct{ delegated, procs map[string]bool }

func (f fakeTree) Delegated(d string) bool { return f.delegated[d] }
func (f fakeTree) HasProcs(d string) bool  { return f.procs[d] }

func set(paths ...string) map[string]bool {
	m := map[string]bool{}
	for _, p := range paths {
		m[p] = true
	}
	return m
}

const userService = "/user.slice/user-1000.slice/user@1000.service"

func TestDelegatedParent(t *testing.T) {
	for _, c := range []struct {
		name, self string
		tree       fakeTree
		want       string // "" = none found; then wantErr is in the error
		wantErr    string
	}{
		{
			name: "a terminal in the user's systemd manager",
			self: userService + "/app.slice/app-term.scope",
			tree: fakeTree{delegated: set(userService, userService+"/app.slice", userService+"/app.slice/app-term.scope"), procs: set(userService + "/app.slice/app-term.scope")},
			want: userService + "/app.slice/deathwatch",
		},
		{
			name: "a Delegate=yes unit whose processes sit in a child",
			self: "/system.slice/ci.service/main",
			tree: fakeTree{delegated: set("/system.slice/ci.service", "/system.slice/ci.service/main"), procs: set("/system.slice/ci.service/main")},
			want: "/system.slice/ci.service/deathwatch",
		},
		{
			name:    "a Delegate=yes unit that holds the supervisor itself",
			self:    "/system.slice/ci.service",
			tree:    fakeTree{delegated: set("/system.slice/ci.service"), procs: set("/system.slice/ci.service")},
			wantErr: "DelegateSubgroup",
		},
		{
			name: "a delegated unit whose own folder holds other processes: the next one up",
			self: userService + "/app.slice/x.service/sub",
			tree: fakeTree{delegated: set(userService, userService+"/app.slice", userService+"/app.slice/x.service"), procs: set(userService+"/app.slice/x.service", userService+"/app.slice/x.service/sub")},
			want: userService + "/app.slice/deathwatch",
		},
		{
			name:    "an ssh session outside the user's manager",
			self:    "/user.slice/user-1000.slice/session-3.scope",
			tree:    fakeTree{delegated: set(userService), procs: set("/user.slice/user-1000.slice/session-3.scope")},
			wantErr: "uid 1000's delegated cgroup is " + userService + ", outside which the supervisor runs",
		},
		{
			name:    "nothing delegated",
			self:    "/system.slice/cron.service",
			tree:    fakeTree{},
			wantErr: "set " + EnvCgroupParent,
		},
		{
			name:    "the root cgroup",
			self:    "/",
			tree:    fakeTree{},
			wantErr: "no delegated cgroup v2",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := delegatedParent(c.self, 1000, c.tree)
			if c.want != "" {
				if err != nil || got != c.want {
					t.Fatalf("got %q, %v; want %q", got, err, c.want)
				}
				// The box below it may be started from the supervisor's cgroup.
				if err := checkCloneInto(c.self, got+"/dw-1", 1000, c.tree); err != nil {
					t.Errorf("the found parent fails the common-ancestor rule: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), c.self) {
				t.Fatalf("got %q, %v; want an error naming %s and saying %q", got, err, c.self, c.wantErr)
			}
		})
	}
}

func TestCommonAncestor(t *testing.T) {
	for _, c := range [][3]string{
		{"/a/b/c", "/a/b/d/e", "/a/b"},
		{"/a/b", "/a/b/c", "/a/b"},
		{"/a/bc", "/a/b/c", "/a"},
		{"/x", "/y", "/"},
		{"/", "/y", "/"},
	} {
		if got := commonAncestor(c[0], c[1]); got != c[2] {
			t.Errorf("commonAncestor(%s, %s) = %s, want %s", c[0], c[1], got, c[2])
		}
	}
}

// A parent that does not share a delegated ancestor with the
// supervisor's own cgroup is refused before the clone, with the rule
// and the folder named.
func TestCheckCloneInto(t *testing.T) {
	tree := fakeTree{delegated: set("/dw-deleg", "/dw-deleg/sup")}
	if err := checkCloneInto("/dw-deleg/sup", "/dw-deleg/deathwatch/dw-1", 2345, tree); err != nil {
		t.Errorf("inside the delegated folder: %v", err)
	}
	err := checkCloneInto("/user.slice/user-2345.slice/session-1.scope", "/dw-deleg/deathwatch/dw-1", 2345, tree)
	for _, want := range []string{"CLONE_INTO_CGROUP", "common ancestor", ": / is not uid 2345's"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("outside it: %v; want it to say %q", err, want)
		}
	}
}

func TestOwnCgroupV2(t *testing.T) {
	for in, want := range map[string]string{
		"0::/user.slice/user-1000.slice/session-2.scope\n":                    "/user.slice/user-1000.slice/session-2.scope",
		"12:pids:/user.slice\n1:name=systemd:/user.slice\n0::/user.slice/x\n": "/user.slice/x",
		"12:pids:/user.slice\n": "",
		"0::relative\n":         "",
	} {
		if got := ownCgroupV2(in); got != want {
			t.Errorf("ownCgroupV2(%q) = %q, want %q", in, got, want)
		}
	}
}
