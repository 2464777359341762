//go:build !linux

package crashpoint

// At does nothing outside Linux: the crash-window tests run
// on Linux only.
func At(string) {}
