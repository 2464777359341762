package supervisor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
)

// RuntimeConfig is what a runtime is constructed with.
type RuntimeConfig struct {
	Log *slog.Logger
	// Stderr receives what the box's init writes to its stderr (the
	// watcher's own log lines, prefixed "watcher: ") while it runs.
	Stderr io.Writer
	// Env is the environment for engine CLIs; nil means os.Environ().
	Env []string
}

// RuntimeFactory makes a runtime.
type RuntimeFactory func(RuntimeConfig) (Runtime, error)

var (
	registryMu sync.Mutex
	registry   = map[string]RuntimeFactory{}
)

// RegisterRuntime makes a runtime available to --runtime NAME. Docker
// and Podman register themselves in docker.go; another runtime (native,
// sbx) registers from its own file's init.
func RegisterRuntime(name string, f RuntimeFactory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	registry[name] = f
}

// NewRuntime constructs the runtime called name.
func NewRuntime(name string, cfg RuntimeConfig) (Runtime, error) {
	registryMu.Lock()
	f, ok := registry[name]
	registryMu.Unlock()
	if !ok {
		return nil, UsageError("--runtime %s: not one of %v", name, RuntimeNames())
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	rt, err := f(cfg)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", name, err)
	}
	return rt, nil
}

// RuntimeNames lists the registered runtimes, sorted.
func RuntimeNames() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	var names []string
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ImageChecker is implemented by runtimes that can tell, before
// anything is created, whether an image exists. The lifecycle calls it
// after Probe; a missing image is an *ExitError with shared.ExitImage.
type ImageChecker interface {
	CheckImage(ctx context.Context, image string) error
}

func registered(name string) bool {
	registryMu.Lock()
	defer registryMu.Unlock()
	_, ok := registry[name]
	return ok
}

// LimitsChecker is implemented by runtimes that can tell, before
// anything is created, that they could not enforce the memory or pids
// limit asked for. A limit that would be silently ignored is refused
// (shared.ExitRefused).
type LimitsChecker interface {
	CheckLimits(memory, pids int64) error
}
