package shared

import "strconv"

// Messages are built without fmt: the watcher links this package, and
// fmt with its reflection is a tenth of the PID-1 binary.

// itoa and utoa are called, not inlined (strconv's fast path, copied
// into each of a hundred messages): 4 KiB less of the watcher's binary.
//
//go:noinline
func itoa(n int) string { return strconv.Itoa(n) }

//go:noinline
func utoa(n uint64) string { return strconv.FormatUint(n, 10) }
func hex8(b byte) string {
	const digits = "0123456789abcdef"
	return "0x" + string([]byte{digits[b>>4], digits[b&15]})
}
