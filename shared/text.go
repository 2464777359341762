package shared

import (
	"strconv"
	"unicode/utf8"
)

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

// Printable is s with every rune a terminal could act on (control
// characters, C1 controls such as CSI, newlines, invalid UTF-8) written
// as a Go escape (\x1b, \u009b, \n, \xff): text a box chose — a file
// name, the watcher's message — as it goes into one of the supervisor's
// own lines. Printable text, spaces and tabs pass as they are.
func Printable(s string) string {
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 || r != '\t' && !strconv.IsPrint(r) {
			return printableFrom(s, i)
		}
		i += w
	}
	return s
}

func printableFrom(s string, i int) string {
	b := append(make([]byte, 0, len(s)+8), s[:i]...)
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1:
			b = append(b, `\x`...)
			b = append(b, "0123456789abcdef"[s[i]>>4], "0123456789abcdef"[s[i]&15])
		case r == '\t' || strconv.IsPrint(r):
			b = append(b, s[i:i+w]...)
		default:
			q := strconv.QuoteRune(r) // '\x1b', '\u009b', '\n'
			b = append(b, q[1:len(q)-1]...)
		}
		i += w
	}
	return string(b)
}
