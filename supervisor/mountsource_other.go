//go:build !linux

package supervisor

// CheckMountSources has no descriptor-based check off Linux (no
// openat2); the engine there (Docker Desktop, sbx) resolves the path in
// its own VM's file sharing.
func CheckMountSources(ms []Mount) error { return nil }
