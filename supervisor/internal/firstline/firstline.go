// Package firstline trims a command's output to the one line a message
// quotes of it.
package firstline

import "strings"

// Of is the first line of s, trimmed: what a one-line message quotes of
// a command's output.
func Of(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}
