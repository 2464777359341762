package kerneltests

import (
	"bytes"
	"context"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/supervisor"
)

// The README's first command, as the demo runs it.
func TestNativeDemo(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	var out bytes.Buffer
	err := supervisor.RunDemo(context.Background(), supervisor.DemoOptions{Supervisor: bins.Supervisor, Watcher: bins.Watcher}, &out)
	t.Logf("demo:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
}
