package kerneltests

import (
	"deathwatch/supervisor/journal"
	"strings"
	"testing"
	"time"

	"deathwatch/supervisor"
	"deathwatch/supervisor/cli"
)

// supervisor ls lists the boxes of every runtime: a running box shows its
// runtime's view (running), not "unknown"; once its supervisor is killed
// and reconcile has run, nothing of the instance is open.
func TestLsEveryRuntime(t *testing.T) {
	for _, proto := range rigs(t) {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)
			run := r.start(r.Instance, nil, "--", "sh", "-c", "echo armed; exec sleep 600")
			if !run.waitFor(60*time.Second, func() bool {
				return run.event(supervisor.EventReady) != nil && strings.Contains(run.stdout(), "armed")
			}) {
				run.kill()
				t.Fatalf("no ready agent: %s", run.stdout())
			}
			box := run.event(supervisor.EventReady).Box
			code, rows, stderr := supervisorJSON[[]cli.LsRow](&r, "--instance", r.Instance, "--journal", r.JournalDir(), "ls", "--json")
			var row *cli.LsRow
			for i := range rows {
				if rows[i].Box == box {
					row = &rows[i]
				}
			}
			if code != 0 || row == nil || row.Runtime != r.Runtime || row.Journal != journal.StateStarted || row.BoxState != "running" || row.Owner != "alive" {
				t.Errorf("ls: exit %d, row %+v of %+v (%s)", code, row, rows, stderr)
			}
			run.kill()
			if code, rep, stderr := r.reconcile(r.Instance); code != 0 || len(rep.Blocked) != 0 {
				t.Errorf("reconcile: exit %d %+v (%s)", code, rep, stderr)
			}
			_, rows, _ = supervisorJSON[[]cli.LsRow](&r, "--instance", r.Instance, "--journal", r.JournalDir(), "ls", "--json")
			if len(rows) != 0 {
				t.Errorf("after reconcile, ls shows %+v", rows)
			}
		})
	}
}
