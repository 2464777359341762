package supervisor

import (
	"strings"

	"deathwatch/supervisor/exitcode"
)

// The lifecycle's and the runtimes' names for the failures of package
// exitcode, which the journal shares: errors.As with *ExitError finds
// an *exitcode.Error, the same type.

// WithCode wraps err with an exit status.
func WithCode(code int, err error) error { return exitcode.With(code, err) }

// EngineError is a runtime that is missing or not running (shared.ExitEngine).
func EngineError(format string, args ...any) error { return exitcode.Engine(format, args...) }

// ImageError is an image or template that was not found (shared.ExitImage).
func ImageError(format string, args ...any) error { return exitcode.Image(format, args...) }

// RefusedError is an unsafe or impossible combination (shared.ExitRefused).
func RefusedError(format string, args ...any) error { return exitcode.Refused(format, args...) }

// UsageError is a bad flag or argument (shared.ExitUsage).
func UsageError(format string, args ...any) error { return exitcode.Usage(format, args...) }

// SetupError is a box that could not be set up (shared.ExitSetupFailed).
func SetupError(format string, args ...any) error { return exitcode.Setup(format, args...) }

// ExitCode is the status for err: its ExitError code, or def.
func ExitCode(err error, def int) int { return exitcode.Of(err, def) }

// FirstLine is the first line of s, trimmed: what a one-line message
// quotes of a command's output.
func FirstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}
