package kerneltests

// The watcher's half of --copy-in, driven frame by frame: a copy that
// does not verify ends the box before the agent with exit 248
// (verify-failed); a path that leaves the tree is a protocol error (the
// box dies, 245); what is planted in the box's tree (a symlink where a
// file or a folder goes) never redirects a write.

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// copyInFrames sends a spec with one copy-in root at dest and the given
// entries; files carry data and the digest of sum (data when "").
type copyFile struct {
	entry     shared.CopyEntry
	data, sum string
}

func sendCopyIn(t *testing.T, c *ktest.Controller, spec shared.Spec, files []copyFile) {
	t.Helper()
	if err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(shared.FrameSpec, spec.Marshal()); err != nil {
		t.Fatal(err)
	}
	var manifest strings.Builder
	var nfiles, nbytes int64
	for _, f := range files {
		if err := c.Send(shared.FrameCopyInEntry, f.entry.Marshal()); err != nil {
			return // the watcher gave up on the stream: its exit says why
		}
		if f.entry.Kind != shared.CopyFile {
			manifest.WriteString(shared.ManifestLine(f.entry, nil))
			continue
		}
		if f.data != "" {
			c.Send(shared.FrameCopyInData, shared.AppendCopyData(nil, 0, []byte(f.data)))
		}
		want := f.sum
		if want == "" {
			want = f.data
		}
		sum := sha256.Sum256([]byte(want))
		c.Send(shared.FrameCopyInSum, sum[:])
		manifest.WriteString(shared.ManifestLine(f.entry, sum[:]))
		nfiles++
		nbytes += f.entry.Size
	}
	digest := sha256.Sum256([]byte(manifest.String()))
	c.Send(shared.FrameCopyInEnd, shared.CopyEnd{Files: nfiles, Bytes: nbytes, Manifest: digest[:]}.Marshal())
}

func TestWatcherCopyIn(t *testing.T) {
	bin := watcherBin(t)
	root := shared.CopyEntry{Kind: shared.CopyDir, Mode: 0o755}
	file := func(p, data string) copyFile {
		return copyFile{entry: shared.CopyEntry{Path: p, Kind: shared.CopyFile, Mode: 0o640, Size: int64(len(data))}, data: data}
	}
	for _, d := range twoDomains {
		t.Run(d.name+"/verified", func(t *testing.T) {
			dir := readyDir(t)
			marker := newMarker(t)
			spec := shellSpec(`busybox stat -c '%u:%g %a' "$1/tree" "$1/tree/a"; busybox cat "$1/tree/a"`, marker)
			spec.Argv = append(spec.Argv, dir)
			spec.CopyIn = []string{dir + "/tree"}
			c := ktest.StartController(t, bin, d.options(false))
			sendCopyIn(t, c, spec, []copyFile{{entry: root}, file("a", "alpha")})
			res := c.Wait(10 * time.Second)
			expectExit(t, c, res, 0, shared.ReasonExited, true)
			if want := "1000:1000 755\n1000:1000 640\nalpha"; c.Stdout() != want {
				t.Errorf("agent saw %q, want %q", c.Stdout(), want)
			}
		})
		t.Run(d.name+"/tampered", func(t *testing.T) {
			dir := readyDir(t)
			marker := newMarker(t)
			spec := shellSpec(`busybox touch "$1/ran"`, marker)
			spec.Argv = append(spec.Argv, dir)
			spec.CopyIn = []string{dir + "/tree"}
			c := ktest.StartController(t, bin, d.options(false))
			f := file("a", "alphX")
			f.sum = "alpha"
			sendCopyIn(t, c, spec, []copyFile{{entry: root}, f})
			res := c.Wait(10 * time.Second)
			expectExit(t, c, res, shared.ExitCopyFailed, shared.ReasonVerifyFailed, true)
			if fileExists(filepath.Join(dir, "ran")) {
				t.Errorf("the agent ran after a copy that did not verify")
			}
		})
		t.Run(d.name+"/escape", func(t *testing.T) {
			dir := readyDir(t)
			spec := shellSpec(`true`, newMarker(t))
			spec.CopyIn = []string{dir + "/tree"}
			c := ktest.StartController(t, bin, d.options(false))
			sendCopyIn(t, c, spec, []copyFile{{entry: root}, file("../escaped", "x")})
			res := c.Wait(10 * time.Second)
			expectExit(t, c, res, shared.ExitLivenessLost, shared.ReasonLivenessLost, true)
			if res.Exit != nil && !strings.Contains(res.Exit.Message, "not a clean relative path") {
				t.Errorf("exit message %q", res.Exit.Message)
			}
			if fileExists(filepath.Join(dir, "escaped")) {
				t.Errorf("a write landed outside the tree")
			}
		})
		t.Run(d.name+"/planted", func(t *testing.T) {
			// The box's tree holds a symlink where a file goes and one
			// where a folder goes, both to a host file and folder.
			dir := readyDir(t)
			victim := filepath.Join(dir, "victim")
			os.MkdirAll(filepath.Join(victim, "d"), 0o755)
			os.WriteFile(filepath.Join(victim, "f"), []byte("untouched"), 0o644)
			os.MkdirAll(filepath.Join(dir, "tree"), 0o755)
			os.Symlink(filepath.Join(victim, "f"), filepath.Join(dir, "tree/a"))
			os.Symlink(filepath.Join(victim, "d"), filepath.Join(dir, "tree/sub"))
			spec := shellSpec(`true`, newMarker(t))
			spec.CopyIn = []string{dir + "/tree"}
			c := ktest.StartController(t, bin, d.options(false))
			sendCopyIn(t, c, spec, []copyFile{{entry: root}, file("a", "alpha"),
				{entry: shared.CopyEntry{Path: "sub", Kind: shared.CopyDir, Mode: 0o755}}, file("sub/b", "beta")})
			res := c.Wait(10 * time.Second)
			expectExit(t, c, res, shared.ExitCopyFailed, shared.ReasonCopyRefused, true)
			if b, _ := os.ReadFile(filepath.Join(victim, "f")); string(b) != "untouched" {
				t.Errorf("the planted file symlink was followed: %q", b)
			}
			if l, err := os.Lstat(filepath.Join(dir, "tree/a")); err != nil || !l.Mode().IsRegular() {
				t.Errorf("tree/a is not a new regular file in place of the symlink: %v", err)
			}
			if fileExists(filepath.Join(victim, "d", "b")) {
				t.Errorf("the planted folder symlink was followed")
			}
		})
	}
}

// hashRate is how many bytes of zeros this machine hashes with SHA-256
// in a second, from a 64 MiB sample: what a test hashes and how long it
// waits for a verification scale with it, so an emulated guest's slower
// hashing is neither a failure nor an hour's run.
func hashRate() float64 {
	const sample = 64 << 20
	h := sha256.New()
	buf := make([]byte, 64<<10)
	start := time.Now()
	for done := 0; done < sample; done += len(buf) {
		h.Write(buf)
	}
	return sample / max(time.Since(start).Seconds(), 1e-3)
}

// hashBytes is what this machine hashes in d at rate, in whole steps of
// step bytes, between lo and hi.
func hashBytes(rate float64, d time.Duration, step, lo, hi int64) int64 {
	n := int64(rate*d.Seconds()) / step * step
	return min(max(n, lo), hi)
}

// TestWatcherCopyInLandedLiveness: the watcher verifies a landed
// copy-in tree (what an archive put left at /.deathwatch-copy-in/N)
// off its frame loop: a verification much longer than the heartbeat
// (a sparse file's zeros to hash, up to 4 GiB: what this machine hashes
// in 10 s; a 1 s heartbeat: a 300 ms one lost to the test's own pinger
// starved at load 8) is no
// silence while the host's pings come, nor is hashing ahead what
// landed before copy-in-landed comes (up to 256 MiB, while the put
// would still run), and the agent starts on the verified trees.
func TestWatcherCopyInLandedLiveness(t *testing.T) {
	bin := watcherBin(t)
	stage := "/" + shared.CopyStageDir
	if _, err := os.Lstat(stage); err == nil {
		t.Fatalf("%s exists on this host already; remove it", stage)
	}
	t.Cleanup(func() { os.RemoveAll(stage) })
	rate := hashRate()
	big := hashBytes(rate, 10*time.Second, 64<<20, 256<<20, 4<<30)
	denseSize := hashBytes(rate, 2*time.Second, 16<<20, 16<<20, 256<<20)
	os.MkdirAll(filepath.Join(stage, "0"), 0o755)
	os.MkdirAll(filepath.Join(stage, "1"), 0o755)
	f, err := os.Create(filepath.Join(stage, "0", "big"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(big)
	f.WriteAt([]byte("end"), big-3)
	f.Close()
	// Before "big" by name: complete, so hashed ahead (no zero block).
	dense := make([]byte, denseSize)
	for i := range dense {
		dense[i] = byte(i%251 + 1)
	}
	if err := os.WriteFile(filepath.Join(stage, "0", "a-dense"), dense, 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(stage, "1", "a"), []byte("alpha"), 0o644)
	// Each root's copy-in-landed: what the frame sender says of it.
	var ends [2]shared.CopyEnd
	for i := range ends {
		s := &shared.CopySender{Frames: shared.CopyInFrames, Send: func(ft shared.FrameType, p []byte) error {
			if ft == shared.FrameCopyInEnd {
				ends[i], _ = shared.ParseCopyEnd(p)
			}
			return nil
		}}
		dfd, err := syscall.Open(stage, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		s.SendTree(uint32(i), dfd, strconv.Itoa(i))
		syscall.Close(dfd)
	}
	dir := readyDir(t)
	spec := shellSpec(`busybox cat "$1/t1/a"; busybox stat -c ' %s' "$1/t0/big" "$1/t0/a-dense"`, newMarker(t))
	spec.Argv = append(spec.Argv, dir)
	spec.CopyIn = []string{dir + "/t0", dir + "/t1"}
	spec.Heartbeat = time.Second
	c := ktest.StartController(t, bin, pid1FD.options(false))
	if err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	c.Send(shared.FrameSpec, spec.Marshal())
	c.StartPings(50 * time.Millisecond)
	// The put still "runs": the watcher hashes ahead meanwhile.
	time.Sleep(2 * time.Second)
	t0 := time.Now()
	for _, e := range ends {
		c.Send(shared.FrameCopyInLanded, e.Marshal())
	}
	_, rerr := c.WaitReady(120*time.Second + 10*time.Duration(float64(big+denseSize)/rate*float64(time.Second)) + ktest.Slack)
	took := time.Since(t0)
	res := c.Wait(30*time.Second + ktest.Slack)
	expectExit(t, c, res, 0, shared.ReasonExited, true)
	if want := fmt.Sprintf("alpha %d\n %d\n", big, denseSize); c.Stdout() != want {
		t.Errorf("agent saw %q, want %q (ready: %v)", c.Stdout(), want, rerr)
	}
	if took < 2*spec.Heartbeat {
		t.Errorf("the verification took %s, not twice the %s heartbeat: this run proves nothing of liveness while hashing", took, spec.Heartbeat)
	}
	t.Logf("two landed trees (%d MiB sparse + %d MiB hashed ahead during 2 s of waiting + 5 bytes; %.0f MiB/s hashed here) verified and moved in %s after copy-in-landed, with a %s heartbeat", big>>20, denseSize>>20, rate/(1<<20), took.Round(time.Millisecond), spec.Heartbeat)
}
