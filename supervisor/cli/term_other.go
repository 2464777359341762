//go:build !linux && !darwin

package cli

import (
	"errors"
	"os"
)

// ttySupported: exec --tty is refused here (no raw mode for a console).
const ttySupported = false

func isTerminal(int) bool { return false }

func makeRaw(int) (func() error, error) {
	return nil, errors.New("raw mode is not supported on this system")
}

func windowSize(int) (rows, cols uint16, ok bool) { return 0, 0, false }

func notifyResize(chan<- os.Signal) func() { return func() {} }
