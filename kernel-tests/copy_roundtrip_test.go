package kerneltests

// --copy-in and --copy-out on every runtime the control stream reaches
// (Docker, rootful and rootless Podman, native): a tree with every kind
// of file goes in and comes back byte for byte, owned by the agent
// inside; what the agent plants cannot reach the host; a limit refuses
// rather than truncates; a killed supervisor leaves nothing reconcile
// cannot remove (a copy creates no object of its own).

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	boxcopy "deathwatch/supervisor/copy"
)

// copyRigs are the rigs copies are tested on.
var copyRigs = []string{"docker", "podman", "podman-rootless", "docker-rootless", "native"}

func forCopyRig(t *testing.T, f func(t *testing.T, r *rig)) {
	for _, proto := range rigs(t, copyRigs...) {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.Setup(t, "cp")
			t.Cleanup(func() { r.assertClean() })
			f(t, &r)
		})
	}
}

// mkdirOwned makes a folder below r.Dir that the rig's user owns.
func (r *rig) mkdirOwned(t *testing.T, name string) string {
	p := filepath.Join(r.Dir, name)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	r.chownTree(t, p)
	return p
}

func (r *rig) chownTree(t *testing.T, p string) {
	if r.User == "" {
		return
	}
	err := filepath.WalkDir(p, func(q string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(q, r.UID, r.GID)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// copyTree writes a tree with every kind of object a copy carries:
// regular, empty and executable files, a symlink inside (to a file and
// to a folder), hard links (two names in two folders), nested folders
// (one read-only, one sticky), a sparse file, odd names.
func copyTree(t *testing.T, root string, sparse int64) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	file := func(p, data string, mode os.FileMode) {
		must(os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		must(os.WriteFile(filepath.Join(root, p), []byte(data), mode))
		must(os.Chmod(filepath.Join(root, p), mode))
	}
	must(os.MkdirAll(root, 0o755))
	file("a.txt", "hello\n", 0o640)
	file("empty", "", 0o600)
	file("run.sh", "#!/bin/sh\necho ran\n", 0o755)
	file("sub/deep/f.txt", "deep\n", 0o644)
	file("ro/inside", "in a read-only folder\n", 0o444)
	file("sticky/x", "x", 0o644)
	for _, odd := range []string{"sp ace", "new\nline", "ünï€ode", "-dash", `quote"'`, "tab\there", strings.Repeat("n", 200)} {
		file("odd/"+odd, odd, 0o644)
	}
	must(os.Symlink("a.txt", filepath.Join(root, "link")))
	must(os.Symlink("sub/deep", filepath.Join(root, "dirlink")))
	must(os.Symlink("../../a.txt", filepath.Join(root, "sub/deep/up")))
	must(os.Link(filepath.Join(root, "a.txt"), filepath.Join(root, "hard")))
	must(os.Link(filepath.Join(root, "a.txt"), filepath.Join(root, "sub/deep/hard2")))
	f, err := os.OpenFile(filepath.Join(root, "sparse"), os.O_CREATE|os.O_WRONLY, 0o644)
	must(err)
	for _, off := range []int64{0, sparse / 3, sparse - 9} {
		_, err := f.WriteAt([]byte("data here"), off)
		must(err)
	}
	must(f.Close())
	// os.Chmod takes a FileMode: the sticky bit is ModeSticky (0o1000
	// is no bit of it).
	must(os.Chmod(filepath.Join(root, "sticky"), os.ModeSticky|0o777))
	must(os.Chmod(filepath.Join(root, "ro"), 0o555))
	if fi, err := os.Lstat(filepath.Join(root, "sticky")); err != nil || fi.Mode()&os.ModeSticky == 0 {
		t.Fatalf("the tree's sticky folder is not sticky: %v %v", fi, err)
	}
}

// treeState describes a tree as a copy must keep it: per path its
// type, permission bits (a folder's and a file's without clear) and
// sticky bit, size, content digest or link target, and which paths
// share an inode.
func treeState(t *testing.T, root string, clear os.FileMode) (map[string]string, [][]string) {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		perm := fi.Mode().Perm()
		if fi.Mode()&os.ModeSymlink == 0 {
			perm &^= clear // a symlink's own mode is always 0777
		}
		desc := fmt.Sprintf("%v %#o", fi.Mode().Type(), perm)
		if fi.Mode()&os.ModeSticky != 0 {
			desc += " sticky"
		}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += fmt.Sprintf(" %d %s", fi.Size(), hex.EncodeToString(sum[:8]))
			inodes[st.Ino] = append(inodes[st.Ino], rel)
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var links [][]string
	for _, ps := range inodes {
		if len(ps) > 1 {
			sort.Strings(ps)
			links = append(links, ps)
		}
	}
	sort.Slice(links, func(i, j int) bool { return links[i][0] < links[j][0] })
	return out, links
}

func TestCopyRoundTrip(t *testing.T) {
	forCopyRig(t, func(t *testing.T, r *rig) {
		src := filepath.Join(r.mkdirOwned(t, "in"), "tree")
		copyTree(t, src, 64<<20)
		r.chownTree(t, filepath.Dir(src))
		// Docker's boxes twice: the default read-only root (frames both
		// ways, the tree in the tmpfs /tmp) and --read-write-root (the
		// archive endpoint both ways, /tmp the layer's).
		roots := []string{"default"}
		if r.Runtime == "docker" {
			roots = append(roots, "read-write-root")
		}
		for _, root := range roots {
			t.Run(root, func(t *testing.T) { copyRoundTrip(t, r, src, root) })
		}
	})
}

// copyRoundTrip copies src into a box whose root is "default" or
// "read-write-root" and back out, and checks both ends.
func copyRoundTrip(t *testing.T, r *rig, src, root string) {
	readWriteRoot := root == "read-write-root"
	os.Remove(r.eventsFile())
	out := filepath.Join(r.mkdirOwned(t, "out"), root)
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	r.chownTree(t, out)
	// Inside: everything the copy made is the agent's (its uid:gid,
	// the box's own on an engine that runs boxes on the host's ids);
	// the executable runs; the hard links share an inode.
	agent := `me=$(id -u):$(id -g); cd /tmp/tree && find . -exec stat -c '%u:%g' {} + | sort -u | while read -r o; do [ "$o" = "$me" ] && echo agent-owned || echo "$o"; done && ./run.sh && ` +
		`[ "$(stat -c %i a.txt)" = "$(stat -c %i sub/deep/hard2)" ] && echo same-inode && cat link`
	args := []string{"--copy-in", src + ":/tmp/tree", "--copy-out", "/tmp/tree:" + out}
	if readWriteRoot {
		args = append(args, "--read-write-root")
	}
	res := runCmd(r.supervisor(nil, append(args, "--", "sh", "-c", agent)...))
	if res.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	if want := "agent-owned\nran\nsame-inode\nhello\n"; res.stdout != want {
		t.Errorf("inside the box:\n%s\nwant:\n%s", res.stdout, want)
	}
	assertSameTree(t, src, filepath.Join(out, "tree"))
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(out, "tree", "sparse"), &st); err != nil || st.Blocks*512 > 8<<20 {
		t.Errorf("the sparse file came back with %d bytes allocated of %d (%v)", st.Blocks*512, st.Size, err)
	}
	checkManifest(t, filepath.Join(out, "tree.manifest"), filepath.Join(out, "tree"))
	// Docker's API has the archive endpoint, used from a writable root
	// only (it does not see a tmpfs /tmp); podman's archive is not used
	// for copy-out, nor is it the transport of its copy-in here.
	want := boxcopy.TransportFrames
	if readWriteRoot {
		want = boxcopy.TransportArchive
	}
	evs := r.events()
	var staged, exported, verified bool
	for _, ev := range evs {
		switch ev.Event {
		case "staged":
			staged = ev.Files > 0 && ev.Bytes >= 64<<20
			t.Logf("staged: %d files, %d bytes, %.3fs, by %s", ev.Files, ev.Bytes, ev.Seconds, ev.Transport)
			if ev.Transport != want {
				t.Errorf("staged by %q, want %q", ev.Transport, want)
			}
		case "exported":
			exported = ev.Files > 0 && ev.Path == filepath.Join(out, "tree")
			t.Logf("exported: %d files, %d bytes, %.3fs, by %s", ev.Files, ev.Bytes, ev.Seconds, ev.Transport)
			if ev.Transport != want {
				t.Errorf("exported by %q, want %q", ev.Transport, want)
			}
		case "verified":
			verified = ev.Path == filepath.Join(out, "tree.manifest")
		}
	}
	if !staged || !exported || !verified {
		t.Errorf("events staged %v exported %v verified %v: %+v", staged, exported, verified, evs)
	}
}

// assertSameTree: back holds what src held, path for path (type, mode,
// size, content, link target) and with the same hard links. A copy-out
// lands nothing writable by the host's group or others: back's modes
// are src's without those bits.
func assertSameTree(t *testing.T, src, back string) {
	t.Helper()
	got, gotLinks := treeState(t, back, 0)
	want, wantLinks := treeState(t, src, 0o022)
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%q: came back as %q, went in as %q", p, got[p], w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%q came back but never went in (%s)", p, got[p])
		}
	}
	if fmt.Sprint(gotLinks) != fmt.Sprint(wantLinks) {
		t.Errorf("hard links came back as %v, went in as %v", gotLinks, wantLinks)
	}
}

// checkManifest re-verifies a manifest against the tree beside it, as a
// controller would later: every file's size, mode and SHA-256.
func checkManifest(t *testing.T, manifest, root string) {
	t.Helper()
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatalf("manifest: %v", err)
	}
	files := 0
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var kind, digest, quoted string
		var mode uint32
		var size int64
		if _, err := fmt.Sscanf(line, "%s %o %d %s %q", &kind, &mode, &size, &digest, &quoted); err != nil {
			t.Fatalf("manifest line %q: %v", line, err)
		}
		if kind != "file" {
			continue
		}
		files++
		p := filepath.Join(root, quoted)
		data, err := os.ReadFile(p)
		fi, _ := os.Stat(p)
		sum := sha256.Sum256(data)
		if err != nil || int64(len(data)) != size || hex.EncodeToString(sum[:]) != digest || uint32(fi.Mode().Perm()) != mode&0o777 {
			t.Errorf("manifest %q does not match %s (%v)", line, p, err)
		}
	}
	if files == 0 {
		t.Errorf("manifest lists no file:\n%s", b)
	}
}

// TestCopyOutPlantedSymlinks: symlinks the agent plants to host paths
// come back as nothing (refused, said on stderr); the host file they
// name is untouched; links inside the tree come back as links. An
// export whose root the agent swapped for a symlink brings nothing.
func TestCopyOutPlantedSymlinks(t *testing.T) {
	forCopyRig(t, func(t *testing.T, r *rig) {
		victim := filepath.Join(r.mkdirOwned(t, "victim"), "secret")
		if err := os.WriteFile(victim, []byte("host secret\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out := r.mkdirOwned(t, "out")
		agent := fmt.Sprintf(`mkdir -p /tmp/out/d /tmp/etc-swap && echo data > /tmp/out/d/f && `+
			`ln -s %[1]s /tmp/out/abs && ln -s ../../../../../../../..%[1]s /tmp/out/d/rel && ln -s ../d/f /tmp/out/d/ok && `+
			`ln -s %[2]s /tmp/out/d/outdir && rmdir /tmp/etc-swap && ln -s /etc /tmp/etc-swap`, victim, out)
		res := runCmd(r.supervisor(nil, "--copy-out", "/tmp/out:"+out, "--copy-out", "/tmp/etc-swap:"+out, "--", "sh", "-c", agent))
		if res.code != 0 {
			t.Fatalf("exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
		}
		if b, _ := os.ReadFile(victim); string(b) != "host secret\n" {
			t.Errorf("the host file changed: %q", b)
		}
		for _, p := range []string{"out/abs", "out/d/rel", "out/d/outdir", "etc-swap"} {
			if _, err := os.Lstat(filepath.Join(out, p)); err == nil {
				t.Errorf("%s was made on the host", p)
			}
		}
		if l, err := os.Readlink(filepath.Join(out, "out/d/ok")); err != nil || l != "../d/f" {
			t.Errorf("the link inside the tree: %q %v", l, err)
		}
		if b, _ := os.ReadFile(filepath.Join(out, "out/d/f")); string(b) != "data\n" {
			t.Errorf("out/d/f = %q", b)
		}
		for _, want := range []string{"abs -> ", "d/rel -> ", "leaves the exported tree"} {
			if !strings.Contains(res.stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, res.stderr)
			}
		}
	})
}

// TestCopyOutLimit: a tree over --copy-out-limit is refused whole
// (exit 248, reason copy-refused) and nothing of it is kept.
func TestCopyOutLimit(t *testing.T) {
	forCopyRig(t, func(t *testing.T, r *rig) {
		out := r.mkdirOwned(t, "out")
		agent := `mkdir -p /tmp/res && echo small > /tmp/res/a && head -c 65536 /dev/zero > /tmp/res/big`
		res := runCmd(r.supervisor(nil, "--copy-out", "/tmp/res:"+out, "--copy-out-limit", "16k", "--", "sh", "-c", agent))
		if res.code != shared.ExitCopyFailed || !strings.Contains(res.stderr, "limit") {
			t.Fatalf("exit %d (want %d)\nstderr: %s", res.code, shared.ExitCopyFailed, res.stderr)
		}
		r.assertRefused(t, out)
	})
}

// assertRefused: the launch ended copy-refused and kept nothing in out.
func (r *rig) assertRefused(t *testing.T, out string) {
	t.Helper()
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("kept after a refusal: %v", ents)
	}
	last := r.events()
	if ev := last[len(last)-2]; ev.Event != "exited" || ev.Reason != string(shared.ReasonCopyRefused) {
		t.Errorf("exited event %+v, want reason %s", ev, shared.ReasonCopyRefused)
	}
}

// TestCopyOutMaxEntries: an agent that makes more entries than
// --copy-out-max-entries (empty files: no byte limit stops them) is
// refused whole by the watcher (exit 248, copy-refused), nothing is
// kept, and the supervisor's memory stays that of a small tree.
func TestCopyOutMaxEntries(t *testing.T) {
	forCopyRig(t, func(t *testing.T, r *rig) {
		out := r.mkdirOwned(t, "out")
		agent := `mkdir -p /tmp/res && cd /tmp/res && i=0 && while [ $i -lt 5000 ]; do : > f$i; i=$((i+1)); done`
		cmd := r.supervisor(nil, "--copy-out", "/tmp/res:"+out, "--copy-out-max-entries", "1000", "--", "sh", "-c", agent)
		// The supervisor's peak RSS (VmHWM only grows): the last value
		// read before it exits. (wait4's ru_maxrss would count the test
		// process's own pages, copied at fork.)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var hwm int64
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
	poll:
		for {
			select {
			case <-waited:
				break poll
			case <-time.After(5 * time.Millisecond):
			}
			b, _ := os.ReadFile(status)
			for _, l := range strings.Split(string(b), "\n") {
				var kb int64
				if _, serr := fmt.Sscanf(l, "VmHWM: %d kB", &kb); serr == nil {
					hwm = kb << 10
				}
			}
		}
		res := result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
		if res.code != shared.ExitCopyFailed || !strings.Contains(res.stderr, "1000 entries") {
			t.Fatalf("exit %d (want %d)\nstderr: %s", res.code, shared.ExitCopyFailed, res.stderr)
		}
		r.assertRefused(t, out)
		rss := hwm
		t.Logf("supervisor peak RSS (VmHWM): %s", shared.FormatSize(rss))
		if rss == 0 || rss > 256<<20 {
			t.Errorf("supervisor max RSS %s for a refused tree of 1000 entries", shared.FormatSize(rss))
		}
	})
}

// TestCopyRefusals: bad copies get one line before anything exists: a
// box path that is not clean and absolute (an escape), a result that
// would overwrite, --stage bind without proof.
func TestCopyRefusals(t *testing.T) {
	forCopyRig(t, func(t *testing.T, r *rig) {
		out := r.mkdirOwned(t, "out")
		if err := os.Mkdir(filepath.Join(out, "res"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"--copy-in", r.Dir + ":../../etc"}, shared.ExitUsage, "not a clean absolute path"},
			{[]string{"--copy-in", r.Dir + ":/work/../etc"}, shared.ExitUsage, "not a clean absolute path"},
			{[]string{"--copy-out", "/tmp/res:" + out}, shared.ExitUsage, "exists already"},
			{[]string{"--copy-in", "/nonexistent/x:/work/x"}, shared.ExitCopyFailed, "no such file"},
		} {
			res := runCmd(r.supervisor(nil, append(c.args, "--", "true")...))
			if res.code != c.code || !strings.Contains(res.stderr, c.want) || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
				t.Errorf("%v: exit %d, stderr %q; want %d and one line saying %q", c.args, res.code, res.stderr, c.code, c.want)
			}
		}
	})
}

// TestCopySupervisorKilledMidCopy: SIGKILL of the supervisor while a
// copy-in streams leaves a box that dies with the stream and a journal
// entry that reconcile closes; no other object exists to clean.
func TestCopySupervisorKilledMidCopy(t *testing.T) {
	forCopyRig(t, func(t *testing.T, r *rig) {
		src := filepath.Join(r.mkdirOwned(t, "in"), "big")
		f, err := os.Create(src)
		if err != nil {
			t.Fatal(err)
		}
		// Sparse: holes cost the copy its digest time, not the disk.
		f.Truncate(2 << 30)
		f.WriteAt([]byte("end"), 2<<30-3)
		f.Close()
		r.chownTree(t, filepath.Dir(src))
		cmd := r.supervisor(nil, "--copy-in", src+":/tmp/big", "--", "true")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The copy (Docker's archive put, the frames elsewhere) runs
		// after start, before the agent is ready.
		r.waitEvent("started", 60*time.Second)
		r.killMidCopy(t, cmd, "ready")
	})
}

// killMidCopy SIGKILLs the supervisor 300 ms on (mid-copy: the event
// after, which says the copy ended, must not have come), waits for the
// box to go with its stream, and has reconcile close what is left.
func (r *rig) killMidCopy(t *testing.T, cmd *exec.Cmd, after string) {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	for _, ev := range r.events() {
		if ev.Event == after {
			t.Errorf("the copy finished before the kill (%s came): this run did not kill the supervisor mid-copy", after)
		}
	}
	end := time.Now().Add(30*time.Second + ktest.Slack)
	for len(r.boxes(r.Instance)) > 0 && time.Now().Before(end) {
		time.Sleep(100 * time.Millisecond)
	}
	code, rep, stderr := r.reconcile(r.Instance)
	if code != 0 {
		t.Fatalf("reconcile exit %d: %+v\n%s", code, rep, stderr)
	}
	t.Logf("reconcile: %+v", rep)
}

// TestCopyOutAfterDeadline: the box outlives its deadline; its agent is
// killed, and the copy-out still comes back (exit 246, the tree kept).
func TestCopyOutAfterDeadline(t *testing.T) {
	forCopyRig(t, func(t *testing.T, r *rig) {
		out := r.mkdirOwned(t, "out")
		agent := `mkdir -p /tmp/res && echo partial > /tmp/res/log && exec sleep 600`
		res := runCmd(r.supervisor(nil, "--deadline", "2s", "--grace", "1s", "--copy-out", "/tmp/res:"+out, "--", "sh", "-c", agent))
		if res.code != shared.ExitDeadline {
			t.Fatalf("exit %d, want %d\nstderr: %s", res.code, shared.ExitDeadline, res.stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(out, "res/log")); string(b) != "partial\n" {
			t.Errorf("res/log = %q", b)
		}
		checkManifest(t, filepath.Join(out, "res.manifest"), filepath.Join(out, "res"))
	})
}

// TestCopyStageBind: where the nonce probe proves the engine shares the
// host's files (a local Docker), --stage bind and auto make the
// copy-in a read-only bind mount: no copy (no staged event), the agent
// reads the host's files and cannot write them.
func TestCopyStageBind(t *testing.T) {
	for _, proto := range rigs(t, "docker") {
		r := *proto
		r.Setup(t, "cp")
		t.Cleanup(func() { r.assertClean() })
		src := r.mkdirOwned(t, "src")
		os.WriteFile(filepath.Join(src, "f"), []byte("from host\n"), 0o644)
		for _, stage := range []string{"bind", "auto"} {
			os.Remove(r.eventsFile())
			res := runCmd(r.supervisor(nil, "--stage", stage, "--copy-in", src+":/tmp/src", "--", "sh", "-c", `cat /tmp/src/f; touch /tmp/src/g 2>/dev/null && echo writable || echo readonly`))
			if res.code != 0 || res.stdout != "from host\nreadonly\n" {
				t.Errorf("--stage %s: exit %d, stdout %q, stderr %s", stage, res.code, res.stdout, res.stderr)
			}
			for _, ev := range r.events() {
				if ev.Event == "staged" {
					t.Errorf("--stage %s copied (staged event) where a bind was proven", stage)
				}
			}
		}
	}
}
