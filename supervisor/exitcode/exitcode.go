// Package exitcode is the supervisor's failures that carry an exit
// status (a shared.Exit* code): the lifecycle, the journal and the
// runtimes return one for an outcome the controller must tell apart (a
// missing engine, a missing image, a refused combination), and the CLI
// exits with its code.
package exitcode

import (
	"errors"
	"fmt"

	"deathwatch/shared"
)

// Error is a failure that carries the supervisor's exit status:
// errors.As with an *Error (or any type with a Code() int method) finds
// it through every %w wrap.
type Error struct {
	Status int
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Code is the exit status (a shared.Exit* code).
func (e *Error) Code() int { return e.Status }

// With wraps err with an exit status (nil stays nil).
func With(code int, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Status: code, Err: err}
}

// Errorf formats an error that carries an exit status.
func Errorf(code int, format string, args ...any) error {
	return &Error{Status: code, Err: fmt.Errorf(format, args...)}
}

// Engine is a runtime that is missing or not running (shared.ExitEngine).
func Engine(format string, args ...any) error { return Errorf(shared.ExitEngine, format, args...) }

// Image is an image or template that was not found (shared.ExitImage).
func Image(format string, args ...any) error { return Errorf(shared.ExitImage, format, args...) }

// Refused is an unsafe or impossible combination (shared.ExitRefused).
func Refused(format string, args ...any) error { return Errorf(shared.ExitRefused, format, args...) }

// Usage is a bad flag or argument (shared.ExitUsage).
func Usage(format string, args ...any) error { return Errorf(shared.ExitUsage, format, args...) }

// Setup is a box that could not be set up (shared.ExitSetupFailed).
func Setup(format string, args ...any) error { return Errorf(shared.ExitSetupFailed, format, args...) }

// Of is the status for err: its Error's code, or def.
func Of(err error, def int) int {
	var e interface{ Code() int }
	if errors.As(err, &e) {
		return e.Code()
	}
	return def
}
