package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"deathwatch/supervisor"
)

// A Go controller's main calls Init before anything else: a runtime
// that re-executes the program (native, for an idmapped mount) is
// served there, and Exec refuses such a runtime without it. Each box is
// one Exec; its error carries the exit code. (memrt, the lifecycle
// tests' in-memory runtime, cannot start an agent: its boxes end in
// setup-failed.)
func ExampleInit() {
	supervisor.Init()

	journal, _ := os.MkdirTemp("", "example-journal")
	defer os.RemoveAll(journal)
	res, err := supervisor.Exec(context.Background(), supervisor.ExecOptions{
		Runtime: "memrt", JournalDir: journal, WatcherPath: "/bin/true",
		Deadline: time.Minute, Argv: []string{"echo", "hi"},
	})
	var failed interface{ Code() int }
	if errors.As(err, &failed) {
		fmt.Println("exit", failed.Code(), res.Reason, "removed:", res.Removed)
	}
	// Output: exit 244 setup-failed removed: true
}
