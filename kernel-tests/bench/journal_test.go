package bench

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor/journal"
)

// seedClosed writes n closed entries into instance's journal under dir
// through the journal package, as n launches would have left them.
func seedClosed(t *testing.T, dir, instance string, n int) *journal.Journal {
	t.Helper()
	j, err := journal.Open(dir, instance, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("20260101-000000-%08x", i)
		e := &journal.Entry{LaunchID: id, Instance: instance, Box: "dw-" + id, Runtime: "native", Nonce: "n",
			Labels: map[string]string{shared.LabelInstance: instance}, State: journal.StateRemoved,
			Exit: &journal.Exit{Code: 0, Reason: "exited"}, Created: now, Updated: now}
		if err := j.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	return j
}

// TestBenchJournal: reconcile and ls over a journal of 100,000 closed
// entries against one of 100, interleaved. Closed entries live apart
// from the open ones, so neither command reads them; ls --all does,
// and its row says what they cost when read. The prune row is the walk
// a closing write makes about once an hour over the closed entries.
func TestBenchJournal(t *testing.T) {
	requireBench(t)
	bins := ktest.Build(t)
	runs := runsFromEnv("DEATHWATCH_BENCH_JOURNAL_RUNS", 10)
	sizes := []int{100, 100000}
	dirs := map[int]string{}
	js := map[int]*journal.Journal{}
	for _, n := range sizes {
		dirs[n] = t.TempDir()
		t0 := time.Now()
		js[n] = seedClosed(t, dirs[n], "bench", n)
		t.Logf("seeded %d closed entries in %v", n, time.Since(t0).Round(time.Millisecond))
	}
	commands := []struct {
		name string
		args []string
		runs int
	}{
		{"reconcile --runtime native", []string{"reconcile", "--json", "--runtime", "native"}, runs},
		{"ls", []string{"ls", "--json"}, runs},
		{"ls --all", []string{"ls", "--json", "--all"}, 3},
	}
	sec := newSection(t, rankJournal, fmt.Sprintf("reconcile and ls over a journal of 100k closed entries vs 100, interleaved, p50 of %d (ls --all: 3)", runs),
		"command", "100 closed", "100k closed", "ratio (p50)")
	for _, c := range commands {
		took := map[int][]time.Duration{}
		for i := 0; i < c.runs; i++ {
			for _, n := range sizes {
				argv := append([]string{"--instance", "bench", "--journal", dirs[n]}, c.args...)
				t0 := time.Now()
				if out, err := exec.Command(bins.Supervisor, argv...).CombinedOutput(); err != nil {
					t.Fatalf("supervisor %v: %v\n%s", argv, err, out)
				}
				took[n] = append(took[n], time.Since(t0))
			}
		}
		small, large := summarize(took[100]), summarize(took[100000])
		sec.Row(c.name, fms(small.P50), fms(large.P50), fmt.Sprintf("%.2fx", large.P50/small.P50))
		sec.Set(c.name, map[string]Stats{"100": small, "100000": large})
	}
	walk := map[int]float64{}
	for _, n := range sizes {
		t0 := time.Now()
		pruned, err := js[n].Prune(journal.DefaultRetention, time.Now())
		if err != nil || pruned != 0 {
			t.Fatalf("prune of %d young entries: %d pruned, %v", n, pruned, err)
		}
		walk[n] = ms(time.Since(t0))
	}
	sec.Row("prune walk, nothing due (once)", fms(walk[100]), fms(walk[100000]), fmt.Sprintf("%.0fx", walk[100000]/walk[100]))
	sec.Note("closed entries are kept %v; a closing write walks them when its marker is over an hour old", journal.DefaultRetention)
	sec.Log()
}
