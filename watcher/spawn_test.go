package watcher

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestSpawnAttr(t *testing.T) {
	a := &agent{Argv: []string{"x"}, Env: []string{"A=1"}, Dir: "/w", Files: []uintptr{5, 6, 7},
		Cred: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{0, 27}, NoSetGroups: true}}
	attr := spawnAttr(a)
	if attr.Dir != "/w" || len(attr.Files) != 3 || attr.Env[0] != "A=1" {
		t.Fatalf("attr = %+v", attr)
	}
	c := attr.Sys.Credential
	if c == nil || c.Uid != 1000 || c.Gid != 1000 || len(c.Groups) != 0 || c.NoSetGroups {
		t.Fatalf("credential = %+v: want 1000:1000 with supplementary groups cleared", c)
	}
	if a.Cred.Groups[1] != 27 {
		t.Fatal("spawnAttr changed its input")
	}
	if attr := spawnAttr(&agent{Argv: []string{"x"}}); attr.Sys.Credential != nil {
		t.Fatal("no identity asked for, but a credential was set (plain mode keeps the caller's)")
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/nonexistent:" + dir}
	if p, err := lookPath("tool", env); err != nil || p != filepath.Join(dir, "tool") {
		t.Errorf("lookPath(tool) = %q, %v", p, err)
	}
	if _, err := lookPath("data", env); err != syscall.EACCES {
		t.Errorf("lookPath(non-executable) error = %v, want EACCES (exit 126)", err)
	}
	if _, err := lookPath("missing", env); err != errNotFound {
		t.Errorf("lookPath(missing) error = %v, want not found (exit 127)", err)
	}
	if p, _ := lookPath("./rel/x", env); p != "./rel/x" {
		t.Errorf("a name with a slash is used as it is, got %q", p)
	}
	if got := execStatus(errNotFound); got != 127 {
		t.Errorf("execStatus(not found) = %d", got)
	}
	if got := execStatus(syscall.EACCES); got != 126 {
		t.Errorf("execStatus(EACCES) = %d", got)
	}
}

func TestPidsCgroupDir(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"9:name=systemd:/\n8:pids:/docker/abc\n0::/docker/abc\n", "/sys/fs/cgroup/pids/docker/abc"},
		{"0::/docker/abc\n8:pids:/\n", "/sys/fs/cgroup/pids/"},
		{"0::/user.slice/box\n", "/sys/fs/cgroup/user.slice/box"},
		{"", ""},
	} {
		if got := pidsCgroupDir(tc.in); got != tc.want {
			t.Errorf("pidsCgroupDir(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestMkdirAll: what os.MkdirAll did for a link's parent: folders made
// on the way, an existing one (or a symlink to one) is fine, a file in
// the way is an error.
func TestMkdirAll(t *testing.T) {
	dir := t.TempDir()
	deep := filepath.Join(dir, "a", "b", "c")
	if err := mkdirAll(deep); err != nil || !isDir(deep) {
		t.Fatalf("mkdirAll(%s) = %v, isDir %v", deep, err, isDir(deep))
	}
	if err := os.Symlink(filepath.Join(dir, "a"), filepath.Join(dir, "s")); err != nil {
		t.Fatal(err)
	}
	if err := mkdirAll(filepath.Join(dir, "s", "b", "d")); err != nil || !isDir(filepath.Join(deep, "..", "d")) {
		t.Errorf("mkdirAll through a symlink to a folder: %v", err)
	}
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := mkdirAll(filepath.Join(file, "x")); err == nil {
		t.Errorf("mkdirAll below a file: no error")
	}
	if err := mkdirAll(file); err == nil || isDir(file) {
		t.Errorf("mkdirAll of a file: %v", err)
	}
}
