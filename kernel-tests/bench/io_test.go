package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// TestBenchIO: the agent's output and input through the watcher and
// the supervisor against the engine's own attach: throughput of the
// same bytes through `supervisor exec --runtime docker` (stdout alone,
// and --stdin cat) vs `docker run --rm -i IMAGE cat`, and the round
// trip of a line-based echo agent through --stdin (p50/p99) per runtime.
func TestBenchIO(t *testing.T) {
	requireBench(t)
	const size = 256 << 20
	s := newSection(t, rankIO, fmt.Sprintf("agent I/O: %d MiB through the control stream; duplex echo round trips", size>>20),
		"what", "runtime", "time", "MiB/s", "p50", "p99")
	defer s.Log()
	file := filepath.Join(t.TempDir(), "input")
	if err := writeZeros(file, size); err != nil {
		t.Fatal(err)
	}
	// timed runs argv with stdin from file ("" none) and counts stdout.
	timed := func(in string, argv ...string) (time.Duration, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		if in != "" {
			f, err := os.Open(in)
			if err != nil {
				return 0, err
			}
			defer f.Close()
			cmd.Stdin = f
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		n, _ := io.Copy(io.Discard, out)
		err = cmd.Wait()
		took := time.Since(t0)
		if err == nil && n != size {
			err = fmt.Errorf("%d bytes of output, want %d", n, size)
		}
		return took, err
	}
	rate := func(d time.Duration) float64 { return float64(size) / (1 << 20) / d.Seconds() }
	best := func(what string, in string, argv ...string) (time.Duration, bool) {
		var ds []time.Duration
		for i := 0; i < 3; i++ {
			d, err := timed(in, argv...)
			if err != nil {
				t.Errorf("%s: %v", what, err)
				return 0, false
			}
			ds = append(ds, d)
		}
		return slices.Min(ds), true
	}

	r := &rig{Rig: ktest.Rigs(t, "docker")[0]}
	r.Setup(t, "bench-io")
	bare, ok1 := best("docker run -i cat", file, "docker", "run", "--rm", "-i", "--network", "none", r.Image, "cat")
	viaCat, ok2 := best("supervisor exec --stdin cat", file, r.execArgs([]string{"--stdin"}, "cat")...)
	viaOut, ok3 := best("supervisor exec head", "", r.execArgs(nil, "head", "-c", strconv.Itoa(size), "/dev/zero")...)
	if ok1 && ok2 && ok3 {
		s.Row("docker run --rm -i IMAGE cat < file", "docker", bare.Round(time.Millisecond).String(), fmt.Sprintf("%.0f", rate(bare)), "", "")
		s.Row("supervisor exec --stdin -- cat < file", "docker", viaCat.Round(time.Millisecond).String(), fmt.Sprintf("%.0f", rate(viaCat)), "", "")
		s.Row("supervisor exec -- head -c N /dev/zero", "docker", viaOut.Round(time.Millisecond).String(), fmt.Sprintf("%.0f", rate(viaOut)), "", "")
		s.Set("throughput_mib_s", map[string]float64{"docker_run_cat": round3(rate(bare)), "supervisor_stdin_cat": round3(rate(viaCat)), "supervisor_stdout": round3(rate(viaOut))})
		// Target ≥ 0.8 of docker's own throughput, as docker's time over ours ≤ 1.25.
		s.Target("supervisor --stdin cat time / docker run -i cat time (≥0.8 throughput)", float64(viaCat)/float64(bare), 1.25, "x")
		s.Target("supervisor stdout time / docker run -i cat time (≥0.8 throughput)", float64(viaOut)/float64(bare), 1.25, "x")
		s.Note("best of 3 runs each; throughput ratio (docker run -i cat = 1): --stdin cat %.2f, stdout alone %.2f", float64(bare)/float64(viaCat), float64(bare)/float64(viaOut))
	}
	if b := baseRig(t, r); b != nil && ok1 && ok2 && ok3 {
		baseCat, ok4 := best("base supervisor exec --stdin cat", file, b.execArgs([]string{"--stdin"}, "cat")...)
		baseOut, ok5 := best("base supervisor exec head", "", b.execArgs(nil, "head", "-c", strconv.Itoa(size), "/dev/zero")...)
		if ok4 && ok5 {
			s.Row("supervisor exec --stdin -- cat < file, base build", "docker", baseCat.Round(time.Millisecond).String(), fmt.Sprintf("%.0f", rate(baseCat)), "", "")
			s.Row("supervisor exec -- head -c N /dev/zero, base build", "docker", baseOut.Round(time.Millisecond).String(), fmt.Sprintf("%.0f", rate(baseOut)), "", "")
			s.Note("this / base time (best of 3 each, run after this build's; no interval): --stdin cat %.2fx, stdout alone %.2fx", float64(viaCat)/float64(baseCat), float64(viaOut)/float64(baseOut))
		}
	}

	for _, name := range []string{"native", "docker"} {
		er := r
		if name != "docker" {
			er = &rig{Rig: ktest.Rigs(t, name)[0]}
			er.Setup(t, "bench-io")
		}
		builds := []*rig{er}
		if b := baseRig(t, er); b != nil {
			builds = append(builds, b)
		}
		ds, err := echoRoundTrips(builds, 5000)
		if err != nil {
			t.Errorf("%s echo: %v", name, err)
			continue
		}
		st := summarize(ds[0])
		s.Row("echo round trip (--stdin, sh while read)", name, "", "", fms(st.P50), fms(st.P99))
		s.Set("echo_"+name, st)
		if len(ds) > 1 {
			bst := summarize(ds[1])
			s.Row("echo round trip, base build", name, "", "", fms(bst.P50), fms(bst.P99))
			s.Set("echo_"+name+"_base", bst)
			s.Note("%s echo round trip, %s", name, versus(ds[0], ds[1]))
		}
	}
}

// echoRoundTrips times n request/answer lines through a `while read`
// echo agent under exec --stdin on each rig, one line at a time, the
// rigs' boxes taking turns line by line.
func echoRoundTrips(rs []*rig, n int) ([][]time.Duration, error) {
	type agent struct {
		in  io.WriteCloser
		out *bufio.Reader
	}
	var as []agent
	for _, r := range rs {
		argv := r.execArgs([]string{"--stdin"}, "sh", "-c", `while read -r l; do echo "$l"; done`)
		cmd := exec.Command(argv[0], argv[1:]...)
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		outp, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		defer cmd.Wait()
		defer in.Close()
		as = append(as, agent{in, bufio.NewReader(outp)})
	}
	ds := make([][]time.Duration, len(rs))
	for i := 0; i < n+100; i++ { // the first 100 warm up
		for k, a := range as {
			t0 := time.Now()
			fmt.Fprintf(a.in, "%d\n", i)
			line, err := a.out.ReadString('\n')
			if err != nil {
				return nil, fmt.Errorf("%s: answer %d: %w", rs[k].key(), i, err)
			}
			if line != strconv.Itoa(i)+"\n" {
				return nil, fmt.Errorf("%s: answer %d is %q", rs[k].key(), i, line)
			}
			if i >= 100 {
				ds[k] = append(ds[k], time.Since(t0))
			}
		}
	}
	return ds, nil
}

func writeZeros(path string, size int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
