package bench

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
)

// benchLine is one round of `go test -bench -benchmem`'s output.
var benchLine = regexp.MustCompile(`^BenchmarkLeanParse/(lean|full|fast)-\d+\s+\d+\s+([\d.]+) ns/op\s+(\d+) B/op\s+(\d+) allocs/op`)

// TestBenchCLIParse: the lean exec parser (supervisor/cli: kong's tags
// rebuilt without help text) against the parse into the full execCLI,
// the cost each `supervisor exec` pays before anything is journaled.
// The cli package's BenchmarkLeanParse runs both, alternating round by
// round (-count), in one process.
func TestBenchCLIParse(t *testing.T) {
	requireBench(t)
	rounds := runsFromEnv("DEATHWATCH_BENCH_CLI_ROUNDS", 10)
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkLeanParse$", "-benchmem", "-benchtime", "50x",
		"-count", strconv.Itoa(rounds), "./supervisor/cli")
	cmd.Dir = ktest.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test -bench BenchmarkLeanParse: %v\n%s", err, out)
	}
	type sample struct{ ns, bytes, allocs []float64 }
	got := map[string]*sample{"fast": {}, "lean": {}, "full": {}}
	for _, line := range strings.Split(string(out), "\n") {
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := got[m[1]]
		for i, dst := range []*[]float64{&s.ns, &s.bytes, &s.allocs} {
			v, _ := strconv.ParseFloat(m[2+i], 64)
			*dst = append(*dst, v)
		}
	}
	median := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	sec := newSection(t, rankCLIParse, fmt.Sprintf("supervisor exec's parse: fastExec (a plain line) and kong's lean parser vs kong's full one, %d rounds of 50 each, interleaved, median", rounds),
		"parser", "rounds", "per parse", "heap", "allocs", "ratio (time)")
	full := got["full"]
	for name, s := range got {
		if len(s.ns) != rounds {
			t.Fatalf("BenchmarkLeanParse printed %d %s rounds, want %d:\n%s", len(s.ns), name, rounds, out)
		}
	}
	for _, name := range []string{"fast", "lean", "full"} {
		s := got[name]
		ratio := "—"
		if name != "full" {
			ratio = fmt.Sprintf("%.2f", median(s.ns)/median(full.ns))
		}
		sec.Row(name, fmt.Sprint(len(s.ns)), fms(median(s.ns)/1e6), fmt.Sprintf("%.0f KiB", median(s.bytes)/1024), fmt.Sprintf("%.0f", median(s.allocs)), ratio)
		sec.Set(name, map[string]any{"ns": s.ns, "bytes": s.bytes, "allocs": s.allocs})
	}
	sec.Note("exec parses a plain line (flags, then -- and the command) with fastExec and anything else (help, an error) with the lean parser; each stays while its ratio is clearly below 1; each round builds fastExec's flag table and the lean type anew, as each process does once")
	sec.Log()
}
