//go:build linux

package docker

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// makeLiveFIFO makes a fresh 0700 folder and a 0600 FIFO of the
// supervisor's own, holding the nonce for the watcher; unlink (at
// ready) takes the FIFO's name and keeps the folder, a box's bind
// source; close is the watcher's EOF, remove leaves nothing.
func TestMakeLiveFIFO(t *testing.T) {
	root := t.TempDir()
	lf, err := makeLiveFIFO(root, "dw-box", "0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{lf.dir: os.ModeDir | 0o700, filepath.Join(lf.dir, LiveFIFOName): os.ModeNamedPipe | 0o600} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want || int(st.Sys().(*syscall.Stat_t).Uid) != os.Geteuid() {
			t.Errorf("%s: mode %v uid %d, want %v owned by %d", p, st.Mode(), st.Sys().(*syscall.Stat_t).Uid, want, os.Geteuid())
		}
	}
	r, err := os.OpenFile(filepath.Join(lf.dir, LiveFIFOName), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 64)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "0123456789abcdef" {
		t.Fatalf("read %q, %v; want the nonce", buf[:n], err)
	}
	if _, err := makeLiveFIFO(root, "dw-box", "x"); err == nil {
		t.Error("a second FIFO for the same box: want an error (the folder must be fresh)")
	}
	lf.unlink()
	if ents, err := os.ReadDir(lf.dir); err != nil || len(ents) != 0 {
		t.Errorf("after unlink the folder holds %v (%v), want it there and empty", ents, err)
	}
	if st, err := os.Lstat(lf.dir); err != nil || st.Mode() != os.ModeDir|0o700 {
		t.Errorf("after unlink the folder is %v (%v), want it kept 0700", st, err)
	}
	lf.close()
	if _, err := r.Read(buf); err != io.EOF {
		t.Errorf("read after close = %v, want EOF", err)
	}
	lf.remove()
	if _, err := os.Lstat(lf.dir); !os.IsNotExist(err) {
		t.Errorf("folder left after remove: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b", ".hidden"} {
		if _, err := makeLiveFIFO(root, bad, "x"); err == nil {
			t.Errorf("box name %q: want an error", bad)
		}
	}
	// A link planted where the root should be is not followed.
	link := filepath.Join(t.TempDir(), "root")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	if _, err := makeLiveFIFO(link, "dw-other", "x"); err == nil {
		t.Error("a root that is a symlink: want an error")
	}
	// Nor one on the path above it.
	if err := os.Mkdir(filepath.Join(root, "live"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := makeLiveFIFO(filepath.Join(link, "live"), "dw-other", "x"); err == nil {
		t.Error("a root below a symlink: want an error")
	}
}

// liveProven proves an engine once and keeps a proof for good; a
// refutation stands for refutedFor only, then the engine is proven again
// (a proof can fail for a passing reason on a loaded host).
func TestLiveProvenVerdict(t *testing.T) {
	root := t.TempDir()
	proofs, holds := 0, false
	f := newFakeAPI(t)
	f.server = "Docker/20.10.24+dfsg1 (linux)"
	f.info = map[string]any{"SecurityOptions": []string{"name=rootless"}}
	e := f.engine()
	e.ProveBind = func(context.Context, string, string) (bool, string) {
		proofs++
		return holds, "detail"
	}
	key, ok := e.LiveKey(context.Background())
	if !ok {
		t.Fatal("the fake rootless daemon offers no live FIFO")
	}
	prove := func() bool { return e.liveProven(context.Background(), root, key) }
	if prove() || prove() || proofs != 1 {
		t.Fatalf("a failed proof: proven, or proven %d times, want refuted once and remembered", proofs)
	}
	refuted, _ := filepath.Glob(filepath.Join(root, ".refuted-*"))
	if len(refuted) != 1 {
		t.Fatalf("refutations %v, want one", refuted)
	}
	old := time.Now().Add(-refutedFor - time.Minute)
	if err := os.Chtimes(refuted[0], old, old); err != nil {
		t.Fatal(err)
	}
	holds = true
	if !prove() || !prove() || proofs != 2 {
		t.Fatalf("after the refutation expired: proofs %d, want one more that holds and is kept", proofs)
	}
	if _, err := os.Lstat(refuted[0]); !os.IsNotExist(err) {
		t.Errorf("the expired refutation is still there: %v", err)
	}
}

// A bind proof killed midway leaves its probe folder: the next proof or
// reconcile removes it once no proof can still be running (ten
// minutes), and never a younger one.
func TestDropStaleProbes(t *testing.T) {
	root := t.TempDir()
	old, young := filepath.Join(root, "probe-1"), filepath.Join(root, "probe-2")
	for _, d := range []string{old, young} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, ".deathwatch-probe-x"), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	then := time.Now().Add(-11 * time.Minute)
	if err := os.Chtimes(old, then, then); err != nil {
		t.Fatal(err)
	}
	dropStaleProbes(root)
	if _, err := os.Lstat(old); !os.IsNotExist(err) {
		t.Errorf("the stale probe folder is still there: %v", err)
	}
	if _, err := os.Lstat(young); err != nil {
		t.Errorf("a probe folder a proof may still use was removed: %v", err)
	}
}

// The write end lives in one thread's own file table, not in the
// process's shared one (holdApart): the supervisor's death closes it in
// that thread's exit, before the address space is torn down. close
// leaves it nowhere.
func TestLiveFIFOHeldApart(t *testing.T) {
	for range 20 {
		heldApart(t)
	}
}

func heldApart(t *testing.T) {
	t.Helper()
	lf, err := makeLiveFIFO(t.TempDir(), "dw-apart", "0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	defer lf.remove()
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(lf.dir, LiveFIFOName), &st); err != nil {
		t.Fatal(err)
	}
	// holders lists the file tables (one per task, shared ones repeat)
	// that hold the FIFO: "self" for the process's, a tid for a task's.
	holders := func() (shared int, tasks []string) {
		match := func(dir string) int {
			n := 0
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				var fst syscall.Stat_t
				if syscall.Stat(filepath.Join(dir, e.Name()), &fst) == nil && fst.Ino == st.Ino && fst.Dev == st.Dev {
					n++
				}
			}
			return n
		}
		shared = match("/proc/self/fd")
		ts, _ := os.ReadDir("/proc/self/task")
		for _, e := range ts {
			if match(filepath.Join("/proc/self/task", e.Name(), "fd")) > 0 {
				tasks = append(tasks, e.Name())
			}
		}
		return shared, tasks
	}
	if lf.release == nil {
		t.Fatal("the write end was not handed to a thread of its own")
	}
	// The process's table (/proc/self/fd: the main thread's) has it not,
	// one task's own table has it: never the main thread's.
	if n, tasks := holders(); n != 0 || len(tasks) != 1 || tasks[0] == strconv.Itoa(os.Getpid()) {
		t.Fatalf("the FIFO is open %d times in the process's table and in the tables of tasks %v; want 0 and exactly one task, not the main thread (%d)", n, tasks, os.Getpid())
	}
	lf.close()
	if n, tasks := holders(); n != 0 || len(tasks) != 0 {
		t.Fatalf("after close the FIFO is still open: %d in the process's table, tasks %v", n, tasks)
	}
}

// A root supervisor keeps its live FIFOs below /run; a user below its
// own runtime folder, where the user's rootless daemon can bind them;
// a user without one (or a relative one) has none.
func TestLiveRootFor(t *testing.T) {
	for _, tc := range []struct {
		euid       int
		runtimeDir string
		want       string
	}{
		{0, "/run/user/0", LiveRoot},
		{0, "", LiveRoot},
		{2346, "/run/user/2346", "/run/user/2346/deathwatch/live"},
		{2346, "", ""},
		{2346, "run/user/2346", ""},
	} {
		if got := LiveRootFor(tc.euid, tc.runtimeDir); got != tc.want {
			t.Errorf("LiveRootFor(%d, %q) = %q, want %q", tc.euid, tc.runtimeDir, got, tc.want)
		}
	}
}

func TestRootIn(t *testing.T) {
	for _, tc := range []struct {
		m    []string
		want uint32
		ok   bool
	}{
		{[]string{"0:1073741824:65536"}, 1073741824, true},
		{[]string{"1:2000:10", "0:1000:1"}, 1000, true},
		{[]string{"0:1000:0"}, 0, false},
		{[]string{"1:1000:65536"}, 0, false},
		{[]string{"0:x:1", "junk"}, 0, false},
		{nil, 0, false},
	} {
		if got, ok := rootIn(tc.m); got != tc.want || ok != tc.ok {
			t.Errorf("rootIn(%q) = %d, %v; want %d, %v", tc.m, got, ok, tc.want, tc.ok)
		}
	}
}
