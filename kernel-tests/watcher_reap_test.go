package kerneltests

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

const orphans = 2000

// orphanScript forks $1 short-lived background processes whose parent
// (a subshell) exits at once, so that they are orphaned to PID 1, then
// says "forked" and waits for the test (folder $2 gets a file "go"),
// then exits 42.
const orphanScript = `
i=0
while [ $i -lt $1 ]; do (true &); i=$((i+1)); done
echo forked
while [ ! -e "$2/go" ]; do busybox sleep 0.02; done
exit 42
`

// zombies lists the zombies among the live processes of a namespace.
func zombies(ns string) []ktest.Proc {
	var out []ktest.Proc
	for _, p := range ktest.InNamespace(ns) {
		if st, err := ktest.ReadStat(p.PID); err == nil && st.State == 'Z' {
			out = append(out, p)
		}
	}
	return out
}

// TestWatcherReapsOrphans: 2,000 short-lived orphans leave no zombie, and
// the main process's status still comes through.
func TestWatcherReapsOrphans(t *testing.T) {
	bin := watcherBin(t)
	for _, d := range twoDomains {
		t.Run(d.name, func(t *testing.T) {
			marker := newMarker(t)
			dir := readyDir(t)
			c := ktest.StartController(t, bin, d.options(false))
			spec := shellSpec(orphanScript, marker)
			spec.Argv = append(spec.Argv, fmt.Sprint(orphans), dir)
			c.Launch(spec)
			start := time.Now()
			ns := c.BoxNamespace(5 * time.Second)
			if !c.WaitStdout("forked", 60*time.Second) {
				t.Fatalf("the agent did not finish forking\n%s", c.Diagnostics())
			}
			forked := time.Since(start)
			var z []ktest.Proc
			if !ktest.WaitFor(5*time.Second, func() bool { z = zombies(ns); return len(z) == 0 }) {
				t.Errorf("%d zombies in the box 5s after %d orphans: %s", len(z), orphans, ktest.Describe(z))
			}
			t.Logf("%d orphans forked in %s; no zombie left %s later", orphans, forked.Round(time.Millisecond), (time.Since(start) - forked).Round(time.Millisecond))
			touch(t, dir+"/go")
			res := c.Wait(10 * time.Second)
			expectExit(t, c, res, 42, shared.ReasonExited, true)
		})
	}
	t.Run("plain-pid1", func(t *testing.T) {
		// The agent counts the zombies itself: it sees the box's own /proc.
		script := strings.Replace(orphanScript, `while [ ! -e "$2/go" ]; do busybox sleep 0.02; done`, `
n=-1; tries=0
while [ $tries -lt 250 ]; do
  n=$(busybox grep -l '^State:[[:space:]]*Z' /proc/[0-9]*/status 2>/dev/null | busybox wc -l)
  [ "$n" -eq 0 ] && break
  busybox sleep 0.02; tries=$((tries+1))
done
echo zombies=$n`, 1)
		cmd := plainCmd(bin, true, nil, bbox, "sh", "-c", script, newMarker(t), fmt.Sprint(orphans))
		start := time.Now()
		code, out, err := ktest.ExitStatus(cmd, 60*time.Second)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Logf("plain mode, %d orphans: %s exit %d after %s", orphans, strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "), code, time.Since(start).Round(time.Millisecond))
		if code != 42 {
			t.Errorf("exit status %d, want 42\n%s", code, out)
		}
		if !strings.Contains(out, "zombies=0") {
			t.Errorf("zombies left in the box: %q", out)
		}
	})
}

// TestWatcherPlainStatuses runs the watcher in plain mode 200 times with
// varied exit codes and deaths by signal, and checks every status.
func TestWatcherPlainStatuses(t *testing.T) {
	bin := watcherBin(t)
	const runs = 200
	signals := []int{1, 9, 15, 10, 12, 14}
	type run struct {
		i, want int
		pid1    bool
		script  string
	}
	var all []run
	for i := 0; i < runs; i++ {
		r := run{i: i, pid1: i%2 == 0}
		if i%10 == 9 {
			sig := signals[(i/10)%len(signals)]
			r.want, r.script = shared.SignalStatus(sig), fmt.Sprintf("kill -%d $$", sig)
		} else {
			r.want = (i * 37) % 126
			r.script = fmt.Sprintf("exit %d", r.want)
		}
		all = append(all, r)
	}
	work := make(chan run)
	var mu sync.Mutex
	var failures []string
	var took [2]time.Duration
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				start := time.Now()
				code, out, err := ktest.ExitStatus(plainCmd(bin, r.pid1, nil, bbox, "sh", "-c", r.script), 10*time.Second)
				d := time.Since(start)
				mu.Lock()
				if r.pid1 {
					took[0] += d
				} else {
					took[1] += d
				}
				if err != nil || code != r.want {
					failures = append(failures, fmt.Sprintf("run %d (pid1=%v, %q): status %d, want %d, err %v, output %q", r.i, r.pid1, r.script, code, r.want, err, out))
				}
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	for _, r := range all {
		work <- r
	}
	close(work)
	wg.Wait()
	t.Logf("%d plain-mode runs (2 at a time) in %s; mean per run: %s as PID 1 under unshare, %s in its own namespace",
		runs, time.Since(start).Round(time.Millisecond), (took[0] / (runs / 2)).Round(10*time.Microsecond), (took[1] / (runs / 2)).Round(10*time.Microsecond))
	for i, f := range failures {
		if i == 10 {
			t.Errorf("... and %d more", len(failures)-10)
			break
		}
		t.Error(f)
	}
}
