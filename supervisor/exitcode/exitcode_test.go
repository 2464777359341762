package exitcode

import (
	"errors"
	"fmt"
	"testing"

	"deathwatch/shared"
)

// TestOf: each constructor's code is what Of reads back through any
// number of %w wraps; an error without one gets the default.
func TestOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{Engine("no engine"), shared.ExitEngine},
		{Image("no image %q", "x"), shared.ExitImage},
		{Refused("refused"), shared.ExitRefused},
		{Usage("bad flag"), shared.ExitUsage},
		{Setup("setup"), shared.ExitSetupFailed},
		{With(shared.ExitLivenessLost, errors.New("lost")), shared.ExitLivenessLost},
		{fmt.Errorf("outer: %w", Refused("inner")), shared.ExitRefused},
		{errors.New("plain"), 7},
	} {
		if got := Of(tc.err, 7); got != tc.want {
			t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if With(shared.ExitUsage, nil) != nil {
		t.Error("With of nil is not nil")
	}
	cause := errors.New("cause")
	if err := Errorf(shared.ExitSetupFailed, "step: %w", cause); !errors.Is(err, cause) {
		t.Errorf("%v does not unwrap to its cause", err)
	}
}
