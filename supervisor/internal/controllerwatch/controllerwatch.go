// Package controllerwatch takes the link to the controller that a
// launch's options ask for, with the exit status each failure carries.
package controllerwatch

import (
	"errors"
	"fmt"

	"deathwatch/shared"
	"deathwatch/supervisor/controller"
	"deathwatch/supervisor/exitcode"
	"deathwatch/supervisor/internal/crashpoint"
)

// Take takes the link to the controller that s asks for
// (nil for none): exec's first step, before anything is created. A
// controller already gone is ExitControllerLost; a descriptor or pid
// that cannot be watched is a usage error.
func Take(s controller.Spec) (*controller.Watch, error) {
	crashpoint.At(crashpoint.BeforeWatch)
	w, err := controller.Take(s)
	switch {
	case errors.Is(err, controller.ErrGone):
		return nil, exitcode.With(shared.ExitControllerLost, fmt.Errorf("%w; no box was started", err))
	case err != nil && s.Parent && !s.HasFD && s.PID == 0:
		return nil, exitcode.Setup("%w", err)
	case err != nil:
		return nil, exitcode.Usage("%w", err)
	}
	return w, nil
}
