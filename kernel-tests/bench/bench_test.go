// Package bench holds deathwatch's benchmarks: figures measured side by
// side with anchors (tini, catatonit, dumb-init, bubblewrap, bare engine
// runs) in the same run, printed as a table and as ratios. Nothing here
// asserts a timing: a target that is missed is reported, not failed.
//
// The benchmarks run only under `make bench` (DEATHWATCH_BENCH=1), as
// root. Under that variable a missing prerequisite fails the run; a
// measurement that cannot be made fails it too. The table is printed at
// the end of the run and written as JSON to bin/bench.json (or to
// DEATHWATCH_BENCH_JSON).
//
// Run counts can be lowered for a quick try of the harness (the figures
// are then rough): DEATHWATCH_BENCH_LAUNCH_RUNS (300),
// DEATHWATCH_BENCH_TIMELINE_RUNS (150), DEATHWATCH_BENCH_DEATH_TRIALS
// (60), DEATHWATCH_BENCH_ENGINE_RUNS (20), DEATHWATCH_BENCH_NATIVE_RUNS
// (100), DEATHWATCH_BENCH_PHASE_RUNS (10), DEATHWATCH_BENCH_KILL_TRIALS
// (20), DEATHWATCH_BENCH_WALLS_RUNS (150), DEATHWATCH_BENCH_CLI_ROUNDS
// (10). DEATHWATCH_BENCH_RUNTIMES (e.g. "native" or "docker,podman")
// keeps only those runtimes' rows of the supervisor sections (podman's
// are rootful podman's, and in the kill section rootless podman's too);
// DEATHWATCH_BENCH_NATIVE_BASELINE=PATH (an earlier supervisor binary)
// adds its native launch, interleaved, to the native launch rows and
// the native timeline: before and after in one run;
// DEATHWATCH_BENCH_ENGINE_BASELINE=PATH does the same for the docker and
// podman launch rows and their split; DEATHWATCH_BENCH_WATCHER_BASELINE
// (an earlier watcher) joins the launch and idle-memory rows.
//
// DEATHWATCH_BENCH_BASE=DIR names a base build to compare against: DIR
// holds the supervisor and watcher of an earlier commit (`git worktree
// add ../base COMMIT && make -C ../base build`, DIR=../base/bin). It
// stands in for each of the three variables above that is unset, a base
// supervisor runs with the base watcher, and the kill, heartbeat and I/O
// sections run the base build beside this one (kill trials and echo
// lines interleaved). Where both builds are measured, a note or column
// says "this / base": the ratio of the p50s with its 95 % bootstrap
// interval, and "SLOWER beyond the noise" when the whole interval lies
// above 1. The other sections (size, death, copy, walls, cli parse,
// kubernetes) measure this build alone.
//
// Other work on the machine shows in every tail: each section prints the
// load average when it began and ended.
package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// benchEnv is the variable `make bench` sets.
const benchEnv = "DEATHWATCH_BENCH"

// requireBench skips outside `make bench` and fails when not root.
func requireBench(t *testing.T) {
	t.Helper()
	if os.Getenv(benchEnv) == "" {
		t.Skipf("benchmarks run only under `make bench` (%s=1, as root)", benchEnv)
	}
	ktest.RequireRoot(t)
}

func TestMain(m *testing.M) {
	// The anchors (tini, dumb-init, ...) and the watcher are measured
	// with the signal dispositions a user's shell gives them.
	if err := ktest.DefaultIgnoredSignals(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if os.Getenv(benchEnv) != "" && len(report.sections) > 0 {
		fmt.Print("\n" + report.table())
		if err := report.writeJSON(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// Target is one goal checked against a measured value: met when the
// value is at most Limit.
type Target struct {
	What  string  `json:"what"`
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	Unit  string  `json:"unit"`
	Met   bool    `json:"met"`
}

func (g Target) String() string {
	verdict := "met"
	if !g.Met {
		verdict = "NOT MET"
	}
	return fmt.Sprintf("%s: %s (target ≤ %s): %s", g.What, fmtNum(g.Value, g.Unit), fmtNum(g.Limit, g.Unit), verdict)
}

func fmtNum(v float64, unit string) string {
	switch unit {
	case "x":
		return fmt.Sprintf("%.2fx", v)
	case "ms":
		return fmt.Sprintf("%.2f ms", v)
	case "MiB":
		return fmt.Sprintf("%.2f MiB", v)
	}
	return fmt.Sprintf("%g %s", v, unit)
}

// Section is one benchmark's part of the report.
type Section struct {
	Title       string         `json:"title"`
	Notes       []string       `json:"notes,omitempty"`
	Header      []string       `json:"header,omitempty"`
	Rows        [][]string     `json:"rows,omitempty"`
	Targets     []Target       `json:"targets,omitempty"`
	NotMeasured []string       `json:"not_measured,omitempty"`
	Data        map[string]any `json:"data,omitempty"`
	Load        string         `json:"load"` // load average when the section began and when it was printed
	rank        int            // position in the report
	t           *testing.T     // the test that measures it
	mu          *sync.Mutex    // guards the fields above
}

type reportT struct {
	mu       sync.Mutex
	sections []*Section
}

var report reportT

// Ranks order the report the same way whatever order the tests ran in.
const (
	rankLaunch = 10 * (iota + 1)
	rankTimeline
	rankRSS
	rankSize
	rankDeath
	rankSupervisorLaunch
	rankSupervisorKill
	rankHeartbeat
	rankIO
	rankCopy
	rankWalls
	rankCLIParse
	rankJournal
)

// newSection adds a section to the report at rank. Make it before
// measuring: it notes the load average then and when Log prints it.
func newSection(t *testing.T, rank int, title string, header ...string) *Section {
	report.mu.Lock()
	defer report.mu.Unlock()
	s := &Section{Title: title, Header: header, Data: map[string]any{}, Load: loadavg(), rank: rank, t: t, mu: &sync.Mutex{}}
	report.sections = append(report.sections, s)
	slices.SortStableFunc(report.sections, func(a, b *Section) int { return a.rank - b.rank })
	return s
}

// loadavg is the 1-minute load average: other work on the machine
// shows in the tails of every figure.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// Row adds one table row.
func (s *Section) Row(cells ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Rows = append(s.Rows, cells)
}

// Note adds a line of explanation below the table.
func (s *Section) Note(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Notes = append(s.Notes, fmt.Sprintf(format, args...))
}

// Target records a goal and whether the value meets it.
func (s *Section) Target(what string, value, limit float64, unit string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Targets = append(s.Targets, Target{What: what, Value: round3(value), Limit: limit, Unit: unit, Met: value <= limit})
}

// Skip records a part that could not be measured, and why.
func (s *Section) Skip(what, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.NotMeasured = append(s.NotMeasured, what+": not measured: "+why)
}

// Set stores machine-readable figures under key.
func (s *Section) Set(key string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Data[key] = v
}

// Log closes the section and prints it through its test (visible with
// -v as it ends).
func (s *Section) Log() {
	s.t.Helper()
	s.mu.Lock()
	s.Load += " → " + loadavg()
	s.mu.Unlock()
	s.t.Logf("\n%s", s.text())
}

func (s *Section) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "== %s (load %s) ==\n", s.Title, s.Load)
	if len(s.Rows) > 0 {
		tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
		if len(s.Header) > 0 {
			fmt.Fprintln(tw, strings.Join(s.Header, "\t"))
		}
		for _, r := range s.Rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		tw.Flush()
	}
	for _, g := range s.Targets {
		fmt.Fprintf(&b, "  %s\n", g)
	}
	for _, n := range s.NotMeasured {
		fmt.Fprintf(&b, "  %s\n", n)
	}
	for _, n := range s.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}

func (r *reportT) table() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "deathwatch benchmarks, %s (%s)\n", time.Now().UTC().Format(time.RFC3339), machine())
	for _, s := range r.sections {
		b.WriteString("\n" + s.text())
	}
	var missed []string
	total := 0
	for _, s := range r.sections {
		for _, g := range s.Targets {
			total++
			if !g.Met {
				missed = append(missed, g.What)
			}
		}
	}
	if len(missed) > 0 {
		fmt.Fprintf(&b, "\ntargets not met (informational), %d of the %d measured here: %s\n", len(missed), total, strings.Join(missed, "; "))
	} else {
		fmt.Fprintf(&b, "\nall %d targets measured here are met\n", total)
	}
	return b.String()
}

func (r *reportT) writeJSON() error {
	path := os.Getenv("DEATHWATCH_BENCH_JSON")
	if path == "" {
		path = filepath.Join(ktest.RepoRoot(), "bin", "bench.json")
	}
	r.mu.Lock()
	doc := struct {
		Time     string     `json:"time"`
		Machine  string     `json:"machine"`
		Sections []*Section `json:"sections"`
	}{time.Now().UTC().Format(time.RFC3339), machine(), r.sections}
	b, err := json.MarshalIndent(doc, "", "  ")
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("encode the report: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	fmt.Printf("bench: figures written to %s\n", path)
	return nil
}

// machine describes where the figures come from.
func machine() string {
	var kernel string
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("Linux %s, %d CPUs, load %s", kernel, runtime.NumCPU(), loadavg())
}

// Stats summarises durations.
type Stats struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Min  float64 `json:"min_ms"`
	Mean float64 `json:"mean_ms"`
}

func summarize(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Stats{
		N: len(s), P50: ms(pct(s, .50)), P95: ms(pct(s, .95)), P99: ms(pct(s, .99)),
		Max: ms(s[len(s)-1]), Min: ms(s[0]), Mean: ms(sum / time.Duration(len(s))),
	}
}

// pct is the nearest-rank percentile of sorted durations.
func pct(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// fms formats milliseconds for the table.
func fms(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// versus compares this build's times with the base build's from the
// same interleaved runs: the ratio of their p50s, its 95 % interval (a
// bootstrap of both samples, seeded so that a run prints one answer)
// and the verdict the interval gives.
func versus(this, base []time.Duration) string {
	if len(this) == 0 || len(base) == 0 {
		return "this / base: no runs to compare"
	}
	r, lo, hi := p50Ratio(this, base)
	verdict := "within the noise"
	switch {
	case lo > 1:
		verdict = "SLOWER beyond the noise"
	case hi < 1:
		verdict = "faster beyond the noise"
	}
	return fmt.Sprintf("this / base p50 %.3fx (95%% %.3f–%.3f, n %d/%d): %s", r, lo, hi, len(this), len(base), verdict)
}

// p50Ratio is p50(a)/p50(b) and the 2.5th and 97.5th percentiles of the
// same ratio over resamples of a and b.
func p50Ratio(a, b []time.Duration) (ratio, lo, hi float64) {
	const resamples = 2000
	rng := rand.New(rand.NewPCG(1, 2))
	median := func(s []time.Duration) float64 {
		s = slices.Clone(s)
		slices.Sort(s)
		return float64(pct(s, .50))
	}
	draw := func(s []time.Duration) []time.Duration {
		out := make([]time.Duration, len(s))
		for i := range out {
			out[i] = s[rng.IntN(len(s))]
		}
		return out
	}
	rs := make([]float64, resamples)
	for i := range rs {
		rs[i] = median(draw(a)) / median(draw(b))
	}
	slices.Sort(rs)
	return median(a) / median(b), rs[resamples*25/1000], rs[resamples*975/1000-1]
}

// byName is the candidate called name (nil if none).
func byName(cs []*candidate, name string) *candidate {
	for _, c := range cs {
		if c.name == name {
			return c
		}
	}
	return nil
}
