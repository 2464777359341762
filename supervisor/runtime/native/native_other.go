//go:build !linux

package native

import (
	"fmt"
	"runtime"
	"time"

	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

// Outside Linux the native runtime is known by name, so that
// `--runtime native` and doctor say why it cannot be used, but it is
// never installed and never picked by --runtime auto.
func init() {
	notHere := fmt.Errorf("native boxes are Linux namespaces: not available on %s (use docker)", runtime.GOOS)
	supervisor.Register(supervisor.Descriptor{
		Name:      "native",
		Bounds:    supervisor.Bounds{Dead: 250 * time.Millisecond, Removed: time.Second},
		Caps:      supervisor.CapHostWatcherOnly,
		Installed: func([]string) error { return notHere },
		New: func(supervisor.RuntimeConfig) (supervisor.Runtime, error) {
			return nil, exitcode.Engine("%w", notHere)
		},
	})
}
