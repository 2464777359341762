package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// TestBenchCopy: --copy-in and --copy-out of a 1 GiB tree (15 files of
// 64 MiB and 4096 of 16 KiB, incompressible) through the control stream
// against Docker's own ways into a running box of the same image: `docker
// cp` both ways, and `tar c | docker exec -i BOX tar x` (and back). The
// copy's own time is the staged and exported events' (the watcher
// verified the tree before staged; the host after exported); the
// others' is the command's. Then a 2 GiB sparse-heavy tree both ways.
func TestBenchCopy(t *testing.T) {
	requireBench(t)
	s := newSection(t, rankCopy, "copies: a 1 GiB tree into and out of a box (docker), beside docker cp and tar | docker exec",
		"what", "way", "time", "MiB/s", "vs docker cp")
	defer s.Log()
	r := &rig{Rig: ktest.Rigs(t, "docker")[0]}
	r.Setup(t, "bench-copy")
	src := filepath.Join(r.Dir, "tree")
	size, err := writeTree(src)
	if err != nil {
		t.Fatal(err)
	}
	mib := float64(size) / (1 << 20)
	rate := func(d time.Duration) string { return fmt.Sprintf("%.0f", mib/d.Seconds()) }

	box := "dw-bench-copy-" + r.Instance
	if out, err := exec.Command("docker", "run", "-d", "--rm", "--name", box, "--network", "none", r.Image, "sleep", "3600").CombinedOutput(); err != nil {
		t.Fatalf("docker run: %v: %s", err, out)
	}
	defer exec.Command("docker", "rm", "-f", box).Run()
	sh := func(script string) (time.Duration, error) {
		t0 := time.Now()
		out, err := exec.Command("sh", "-c", script).CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%s: %v: %s", script, err, out)
		}
		return time.Since(t0), nil
	}
	best := func(what string, f func(i int) (time.Duration, error)) time.Duration {
		var ds []time.Duration
		for i := 0; i < 2; i++ {
			d, err := f(i)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			ds = append(ds, d)
		}
		return slices.Min(ds)
	}
	cpIn := best("docker cp in", func(i int) (time.Duration, error) {
		return sh(fmt.Sprintf("docker cp %s %s:/tmp/cp%d", src, box, i))
	})
	tarIn := best("tar | docker exec tar x", func(i int) (time.Duration, error) {
		return sh(fmt.Sprintf("docker exec %[2]s mkdir /tmp/tar%[3]d && tar -C %[1]s -cf - . | docker exec -i %[2]s tar -C /tmp/tar%[3]d -xf -", src, box, i))
	})
	cpOut := best("docker cp out", func(i int) (time.Duration, error) {
		return sh(fmt.Sprintf("docker cp %s:/tmp/cp0 %s", box, filepath.Join(r.Dir, fmt.Sprintf("cpout%d", i))))
	})
	tarOut := best("docker exec tar c | tar x", func(i int) (time.Duration, error) {
		d := filepath.Join(r.Dir, fmt.Sprintf("tarout%d", i))
		return sh(fmt.Sprintf("mkdir %[1]s && docker exec %[2]s tar -C /tmp/cp0 -cf - . | tar -C %[1]s -xf -", d, box))
	})
	for i := 0; i < 2; i++ {
		os.RemoveAll(filepath.Join(r.Dir, fmt.Sprintf("cpout%d", i)))
		os.RemoveAll(filepath.Join(r.Dir, fmt.Sprintf("tarout%d", i)))
	}

	var staged, exported []time.Duration
	var wall time.Duration
	var transport string
	for i := 0; i < 2; i++ {
		out := filepath.Join(r.Dir, fmt.Sprintf("out%d", i))
		os.Mkdir(out, 0o755)
		st, ex, w, tr, err := copyRun(r, out, src, "/tmp/tree", "2g")
		transport = tr
		if err != nil {
			t.Fatalf("supervisor exec --copy-in --copy-out: %v", err)
		}
		staged, exported = append(staged, st), append(exported, ex)
		wall = w
		os.RemoveAll(out)
	}
	in, outT := slices.Min(staged), slices.Min(exported)
	ratio := func(d, cp time.Duration) string { return fmt.Sprintf("%.2f", cp.Seconds()/d.Seconds()) }
	s.Row("docker cp HOST BOX:PATH", "in", dur(cpIn), rate(cpIn), "1.00")
	s.Row("tar c | docker exec -i BOX tar x", "in", dur(tarIn), rate(tarIn), ratio(tarIn, cpIn))
	s.Row("supervisor exec --copy-in (staged event, "+transport+")", "in", dur(in), rate(in), ratio(in, cpIn))
	s.Row("docker cp BOX:PATH HOST", "out", dur(cpOut), rate(cpOut), "1.00")
	s.Row("docker exec BOX tar c | tar x", "out", dur(tarOut), rate(tarOut), ratio(tarOut, cpOut))
	s.Row("supervisor exec --copy-out (exported event)", "out", dur(outT), rate(outT), ratio(outT, cpOut))
	s.Note("best of 2 runs each; %.0f MiB in %d files; 'vs docker cp' is docker cp's time over this row's (above 1: faster than docker cp); one supervisor run in and out took %s end to end (launch, copy-in, agent, copy-out, removal)", mib, 15+4096, dur(wall))
	s.Set("copy_mib_s", map[string]float64{
		"docker_cp_in": round3(mib / cpIn.Seconds()), "tar_exec_in": round3(mib / tarIn.Seconds()), "copy_in": round3(mib / in.Seconds()),
		"docker_cp_out": round3(mib / cpOut.Seconds()), "tar_exec_out": round3(mib / tarOut.Seconds()), "copy_out": round3(mib / outT.Seconds()),
	})
	// Targets as time over docker cp's: at most 1 is at least as fast.
	s.Target("copy-in time / docker cp in", in.Seconds()/cpIn.Seconds(), 1, "x")
	s.Target("copy-out time / docker cp out", outT.Seconds()/cpOut.Seconds(), 1, "x")

	// The 2 GiB tree: a sparse file of 2 GiB with data at three places,
	// beside 64 MiB of data files; in and out, verified both ways.
	big := filepath.Join(r.Dir, "big")
	os.MkdirAll(big, 0o755)
	f, err := os.Create(filepath.Join(big, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 1 << 30, 2<<30 - 4096} {
		f.WriteAt([]byte(strings.Repeat("d", 4096)), off)
	}
	f.Close()
	if err := writeFiles(big, 4, 16<<20); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(r.Dir, "bigout")
	os.Mkdir(out, 0o755)
	st, ex, w, _, err := copyRun(r, out, big, "/tmp/big", "3g")
	if err != nil {
		t.Fatalf("2 GiB tree: %v", err)
	}
	s.Row("2 GiB sparse-heavy tree (2 GiB + 64 MiB, verified)", "in", dur(st), "", "")
	s.Row("2 GiB sparse-heavy tree (2 GiB + 64 MiB, verified)", "out", dur(ex), "", "")
	s.Note("2 GiB tree: the whole launch took %s; frames send no holes, but both ends hash them as zeros; an archive copy-in sends them as zeros (tar has none) and the watcher punches them back", dur(w))
}

// copyRun is one supervisor exec that copies src in to box and back out
// to out; it returns the staged and exported events' durations and the
// copy-in's transport (archive: the put, the box's start and the
// watcher's verification).
func copyRun(r *rig, out, src, box, limit string) (staged, exported, wall time.Duration, transport string, err error) {
	events := filepath.Join(r.Dir, "copy-events.jsonl")
	os.Remove(events)
	argv := r.execArgs([]string{"--events", events, "--copy-in", src + ":" + box, "--copy-out", box + ":" + out, "--copy-out-limit", limit}, "true")
	t0 := time.Now()
	if b, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return 0, 0, 0, "", fmt.Errorf("%v: %s", err, b)
	}
	wall = time.Since(t0)
	f, err := os.Open(events)
	if err != nil {
		return 0, 0, 0, "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev struct {
			Event     string  `json:"event"`
			Seconds   float64 `json:"seconds"`
			Transport string  `json:"transport"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			switch ev.Event {
			case "staged":
				staged = time.Duration(ev.Seconds * float64(time.Second))
				transport = ev.Transport
			case "exported":
				exported = time.Duration(ev.Seconds * float64(time.Second))
			}
		}
	}
	if staged == 0 || exported == 0 {
		return 0, 0, 0, "", fmt.Errorf("no staged or exported event in %s", events)
	}
	return staged, exported, wall, transport, nil
}

// writeTree writes 15 files of 64 MiB and 4096 of 16 KiB: 1 GiB.
func writeTree(dir string) (int64, error) {
	if err := writeFiles(dir, 15, 64<<20); err != nil {
		return 0, err
	}
	if err := writeFiles(filepath.Join(dir, "small"), 4096, 16<<10); err != nil {
		return 0, err
	}
	return 15*64<<20 + 4096*16<<10, nil
}

func writeFiles(dir string, n, size int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, size)
	for i := 0; i < n; i++ {
		rng.Read(buf)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), buf, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// dur is a duration rounded to the millisecond, for a table cell.
func dur(d time.Duration) string { return d.Round(time.Millisecond).String() }
