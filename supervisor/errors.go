package supervisor

import (
	"errors"
	"fmt"
	"strings"

	"deathwatch/shared"
)

// ExitError is a failure that carries the supervisor's exit status
// (a shared.Exit* code). Runtimes return one for an outcome the
// controller must tell apart: a missing engine, a missing image, a
// refused combination.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// WithCode wraps err with an exit status.
func WithCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: code, Err: err}
}

// codef formats an error that carries an exit status.
func codef(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// EngineError is a runtime that is missing or not running (shared.ExitEngine).
func EngineError(format string, args ...any) error { return codef(shared.ExitEngine, format, args...) }

// ImageError is an image or template that was not found (shared.ExitImage).
func ImageError(format string, args ...any) error { return codef(shared.ExitImage, format, args...) }

// RefusedError is an unsafe or impossible combination (shared.ExitRefused).
func RefusedError(format string, args ...any) error {
	return codef(shared.ExitRefused, format, args...)
}

// UsageError is a bad flag or argument (shared.ExitUsage).
func UsageError(format string, args ...any) error { return codef(shared.ExitUsage, format, args...) }

// SetupError is a box that could not be set up (shared.ExitSetupFailed).
func SetupError(format string, args ...any) error {
	return codef(shared.ExitSetupFailed, format, args...)
}

// ExitCode is the status for err: its ExitError code, or def.
func ExitCode(err error, def int) int {
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return def
}

// FirstLine is the first line of s, trimmed: what a one-line message
// quotes of a command's output.
func FirstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}
