package supervisor

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"deathwatch/shared"
)

// reexecrt is memrt with a hidden mode: a runtime that re-executes the
// program.
func init() {
	Register(Descriptor{Name: "reexecrt", Bounds: Bounds{Dead: time.Second, Removed: time.Second},
		New:     func(RuntimeConfig) (Runtime, error) { return reexecRuntime{theMem}, nil },
		InitArg: "__reexecrt", InitMain: func() int { return 0 }})
}

type reexecRuntime struct{ *memRuntime }

func (reexecRuntime) Name() string { return "reexecrt" }

// A program that did not call Init gets one line naming it from Exec,
// and nothing is created; once Init was called the launch goes on.
func TestExecWithoutInit(t *testing.T) {
	defer initCalled.Store(initCalled.Load())
	initCalled.Store(false)
	var stderr strings.Builder
	o := ExecOptions{JournalDir: t.TempDir(), Runtime: "reexecrt", WatcherPath: "/bin/true", Argv: []string{"true"}}
	code := runExec(&o, &ExecIO{Stdout: io.Discard, Stderr: &stderr, Signals: make(chan os.Signal)})
	if code != shared.ExitUsage || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "call supervisor.Init() first in main") {
		t.Errorf("without Init: exit %d, stderr %q", code, stderr.String())
	}
	initCalled.Store(true)
	stderr.Reset()
	o.IO = ExecIO{}
	_, err := Exec(t.Context(), o)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code() != shared.ExitSetupFailed {
		t.Errorf("with Init: %v", err)
	}
}

// initMode serves only a registered hidden mode.
func TestInitMode(t *testing.T) {
	if run, ok := initMode([]string{"__reexecrt", "x"}); !ok || run() != 0 {
		t.Error("a registered hidden mode is not served")
	}
	if _, ok := initMode([]string{"exec"}); ok {
		t.Error("a command is taken for a hidden mode")
	}
}
