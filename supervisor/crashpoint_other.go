//go:build !linux

package supervisor

// crashpoint does nothing outside Linux: the crash-window tests run
// on Linux only.
func crashpoint(string) {}
