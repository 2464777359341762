//go:build !linux

package mountsource

import "deathwatch/supervisor"

// Check has no descriptor-based check off Linux (no
// openat2); the engine there (Docker Desktop, sbx) resolves the path in
// its own VM's file sharing.
func Check(ms []supervisor.Mount) error { return nil }
