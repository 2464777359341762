package supervisor

// The hidden modes a runtime re-executes the program for, and the one
// call at the top of main that serves them.

import (
	"os"
	"sync/atomic"

	"deathwatch/supervisor/exitcode"
)

// initCalled is set once Init returned to its caller's main.
var initCalled atomic.Bool

// Init serves the hidden mode a runtime re-executed this program for,
// when os.Args names one, and exits with its status; otherwise it
// returns at once. A program that runs boxes (a Go controller, the
// supervisor's CLI) calls it first in main, before it does anything
// else: the native runtime re-executes the program (/proc/self/exe) to
// hold the user namespace of an idmapped mount, and that copy must run
// the runtime's code, never the program's own main. Exec refuses a
// runtime that re-executes the program when Init was not called.
func Init() {
	if run, ok := initMode(os.Args[1:]); ok {
		os.Exit(run())
	}
	initCalled.Store(true)
}

// initMode returns the hidden mode args[0] asks for, if a runtime
// registered one.
func initMode(args []string) (func() int, bool) {
	if len(args) == 0 {
		return nil, false
	}
	for _, d := range Descriptors() {
		if d.InitArg != "" && d.InitArg == args[0] && d.InitMain != nil {
			return d.InitMain, true
		}
	}
	return nil, false
}

// checkInit refuses runtime d in a program that did not call Init: its
// re-executed copy would run the program's main again.
func checkInit(d Descriptor) error {
	if d.InitArg == "" || initCalled.Load() {
		return nil
	}
	return exitcode.Usage("runtime %s re-executes this program (/proc/self/exe) for its box setup: call supervisor.Init() first in main", d.Name)
}
