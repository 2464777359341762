package kerneltests

import (
	"bufio"
	"deathwatch/supervisor/journal"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const journalWriterEnv = "DW_TEST_JOURNAL_WRITER_DIR"

// TestReconcileJournalWriter is not a test on its own: with
// DW_TEST_JOURNAL_WRITER_DIR set it is the helper process of
// TestReconcileJournalKill, rewriting journal entries as fast as it can
// until it is killed.
func TestReconcileJournalWriter(t *testing.T) {
	dir := os.Getenv(journalWriterEnv)
	if dir == "" {
		return
	}
	j, err := journal.Open(dir, "kill9", nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	big := strings.Repeat("x", 48<<10) // a write that takes a while
	for i := 0; ; i++ {
		e := &journal.Entry{
			LaunchID: fmt.Sprintf("launch-%d", i%5), Instance: "kill9", Box: fmt.Sprintf("dw-%d", i%5),
			Runtime: "docker", Nonce: fmt.Sprintf("nonce-%d", i), State: journal.StateStarted,
			Labels:  map[string]string{"pad": big[:(i*7919)%len(big)]},
			Created: time.Now().UTC(),
		}
		if err := j.Put(e); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		if i == 0 {
			// Only now: a kill that came before the first entry was
			// whole would leave an empty journal (a loaded disk's fsync
			// can outlast the test's random delay), and "entries
			// vanished" would be a false alarm.
			fmt.Println("writing")
		}
	}
}

// kill -9 during journal writes, ≥100 times: the journal always loads,
// every entry parses and is one that was written whole.
func TestReconcileJournalKill(t *testing.T) {
	dir := t.TempDir()
	const reps = 150
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	tmpLeft := 0
	for i := 0; i < reps; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReconcileJournalWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), journalWriterEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if !strings.HasPrefix(line, "writing") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("rep %d: writer said %q", i, line)
		}
		time.Sleep(time.Duration(rng.Intn(4000)) * time.Microsecond)
		cmd.Process.Kill()
		cmd.Wait()

		j, err := journal.Open(dir, "kill9", nil)
		if err != nil {
			t.Fatal(err)
		}
		es, bad, err := j.List()
		if err != nil || len(bad) > 0 {
			t.Fatalf("rep %d: the journal does not load after kill -9: %v %v", i, err, bad)
		}
		for _, e := range es {
			if e.Instance != "kill9" || !strings.HasPrefix(e.Nonce, "nonce-") || e.State != journal.StateStarted {
				t.Fatalf("rep %d: entry %s is not one that was written: %+v", i, e.LaunchID, e)
			}
		}
		if i > 0 && len(es) == 0 {
			t.Fatalf("rep %d: entries vanished", i)
		}
		tmps, _ := filepath.Glob(filepath.Join(j.Dir(), ".*.tmp-*"))
		tmpLeft = len(tmps)
	}
	t.Logf("%d kill -9 during journal writes: the journal loaded every time (%d temp files of killed writes left, ignored)", reps, tmpLeft)
}
