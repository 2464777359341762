package cli

import (
	"strings"
	"testing"

	"deathwatch/shared"
	"deathwatch/supervisor/controller"
	"deathwatch/supervisor/exitcode"
)

func TestParseController(t *testing.T) {
	for _, c := range []struct {
		name   string
		fd     int
		pid    string
		detach bool
		want   controller.Spec
		bad    string // a substring of the usage error; "" none
	}{
		{"default: the parent process", -1, "", false, controller.Spec{Parent: true}, ""},
		{"--controller-fd", 3, "", false, controller.Spec{FD: 3, HasFD: true}, ""},
		{"--controller-pid", -1, "42", false, controller.Spec{PID: 42}, ""},
		{"--controller-pid with its start time", -1, "42:9001", false, controller.Spec{PID: 42, StartTime: 9001}, ""},
		{"--detach", -1, "", true, controller.Spec{Detached: true}, ""},
		{"stdout is not a controller's pipe", 1, "", false, controller.Spec{}, "3 or more"},
		{"two links", 3, "42", false, controller.Spec{}, "pass one"},
		{"a watch and --detach", -1, "42", true, controller.Spec{}, "pass one"},
		{"not a pid", -1, "x", false, controller.Spec{}, "want PID"},
		{"pid 0", -1, "0", false, controller.Spec{}, "want PID"},
		{"not a start time", -1, "42:x", false, controller.Spec{}, "clock ticks"},
	} {
		got, err := parseController(c.fd, c.pid, c.detach)
		switch {
		case c.bad != "":
			if err == nil || !strings.Contains(err.Error(), c.bad) || exitcode.Of(err, 0) != shared.ExitUsage {
				t.Errorf("%s: %v; want a usage error saying %q", c.name, err, c.bad)
			}
		case err != nil || got != c.want:
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}
