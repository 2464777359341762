//go:build !(amd64 || (arm64 && linux)) || purego

package shared

// No block function in assembly for this architecture (or the purego
// tag is set): the pure-Go block runs.

var sha256HW = false

func sha256BlockHW(h *[8]uint32, p []byte) { sha256BlockGeneric(h, p) }
