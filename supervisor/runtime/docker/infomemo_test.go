package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deathwatch/supervisor"
	procfs "deathwatch/supervisor/proc"
)

func TestProcStartTime(t *testing.T) {
	for _, tc := range []struct{ stat, want string }{
		{"8354 (dockerd) S 1 8354 8354 0 -1 4194560 41232 0 1 0 2009 2780 0 0 20 0 13 0 1269033 2092314624 17911 18446744073709551615", "1269033"},
		// A command name with spaces and parentheses.
		{"42 (a) b (c)) R 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0", "777"},
		{"42 (dockerd) S 1 2 3", ""},
		{"no parenthesis at all", ""},
	} {
		// daemonID reads the start time with proc.ParseStat.
		got := ""
		if st, err := procfs.ParseStat(42, []byte(tc.stat)); err == nil {
			got = fmt.Sprint(st.Start)
		}
		if got != tc.want {
			t.Errorf("start time of %q = %q, want %q", tc.stat, got, tc.want)
		}
	}
}

func TestInfoMemoDir(t *testing.T) {
	for _, tc := range []struct {
		euid int
		env  map[string]string
		want string
	}{
		{0, map[string]string{"XDG_RUNTIME_DIR": "/run/user/0"}, "/run/deathwatch/docker-info"},
		{1000, map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"}, "/run/user/1000/deathwatch/docker-info"},
		{1000, map[string]string{"XDG_RUNTIME_DIR": "relative"}, ""},
		{1000, nil, ""},
	} {
		if got := infoMemoDir(tc.euid, tc.env); got != tc.want {
			t.Errorf("infoMemoDir(%d, %v) = %q, want %q", tc.euid, tc.env, got, tc.want)
		}
	}
}

func TestParseInfoMemo(t *testing.T) {
	const d = "boot/8354/1269033"
	rec := func(daemon, detail string, rootless bool) []byte {
		return fmt.Appendf(nil, `{"daemon":%q,"version":"20.10.24","rootless":%v,"detail":%q}`, daemon, rootless, detail)
	}
	for _, tc := range []struct {
		name   string
		b      []byte
		daemon string
		ok     bool
		want   infoMemo
	}{
		{"the statement", rec(d, rootfulNoUserns, false), d, true, infoMemo{Daemon: d, Version: "20.10.24", Detail: rootfulNoUserns}},
		{"a remapping daemon", rec(d, "", false), d, true, infoMemo{Daemon: d, Version: "20.10.24"}},
		{"a rootless daemon", rec(d, "", true), d, true, infoMemo{Daemon: d, Version: "20.10.24", Rootless: true}},
		{"another daemon (restarted)", rec("boot/8354/1300000", rootfulNoUserns, false), d, false, infoMemo{}},
		{"no daemon to match", rec("", rootfulNoUserns, false), "", false, infoMemo{}},
		{"a detail that is not the statement", rec(d, "something else", false), d, false, infoMemo{}},
		{"not JSON", []byte("\x00\x00\x00"), d, false, infoMemo{}},
	} {
		got, ok := parseInfoMemo(tc.b, tc.daemon)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: parseInfoMemo = %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// fakeProc makes a /proc that shows process pid as comm, started at
// start ticks, and returns its root.
func fakeProc(t *testing.T, pid int, comm, start string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range map[string]string{
		fmt.Sprintf("%d/stat", pid): fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 13 0 %s 0 0", pid, comm, pid, pid, start),
		"sys/kernel/random/boot_id": "e41314f7-6c58-4d9b-abe3-9394b949247f\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestDaemonID(t *testing.T) {
	root := fakeProc(t, 8354, "dockerd", "1269033")
	if got, want := daemonID(root, 8354), "e41314f7-6c58-4d9b-abe3-9394b949247f/8354/1269033"; got != want {
		t.Errorf("daemonID = %q, want %q", got, want)
	}
	if got := daemonID(root, 0); got != "" {
		t.Errorf("a listener in another pid namespace (pid 0): %q", got)
	}
	if got := daemonID(fakeProc(t, 1, "systemd", "1"), 1); got != "" {
		t.Errorf("systemd's activated socket: %q", got)
	}
	if got := daemonID(root, 9999); got != "" {
		t.Errorf("a process that is gone: %q", got)
	}
}

// exec's probe of a root listener asks /info once per daemon process:
// the next launch against the same daemon reads the verdict it left
// and says the same statement without asking; a daemon that restarted
// (another start time) is asked again.
func TestAPIProbeRemembersInfo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the fake engine's listener is this test: root only")
	}
	f := newFakeAPI(t)
	f.server = "Docker/20.10.24 (linux)"
	dir := filepath.Join(t.TempDir(), "memo")
	old := procRoot
	t.Cleanup(func() { procRoot = old })
	procRoot = fakeProc(t, os.Getpid(), "dockerd", "1269033")
	launch := func() (stderr string, asked bool) {
		t.Helper()
		f.mu.Lock()
		f.calls = nil
		f.mu.Unlock()
		out, err := os.CreateTemp(t.TempDir(), "stderr")
		if err != nil {
			t.Fatal(err)
		}
		e := f.engine()
		e.Stderr, e.infoMemoDir = out, dir
		if info, err := e.Probe(context.Background()); err != nil || !info.Present || info.Rootless {
			t.Fatalf("probe: %+v %v", info, err)
		}
		if err := e.Remove(context.Background(), &supervisor.Box{Name: "dw-none"}); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(out.Name())
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.calls {
			asked = asked || strings.HasSuffix(c, "/info")
		}
		return string(b), asked
	}
	for i, want := range []bool{true, false, false} {
		said, asked := launch()
		if asked != want {
			t.Errorf("launch %d: asked /info %v, want %v", i+1, asked, want)
		}
		if strings.Count(said, "\n") != 1 || !strings.Contains(said, "userns-remap") {
			t.Errorf("launch %d: rootful statement %q", i+1, said)
		}
	}
	// The daemon restarted: its verdict is asked again.
	procRoot = fakeProc(t, os.Getpid(), "dockerd", "1300000")
	if _, asked := launch(); !asked {
		t.Error("a restarted daemon was not asked /info")
	}
	// A record another user could have written is not read.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, asked := launch(); !asked {
		t.Error("a record in a folder others can write was read")
	}
}
