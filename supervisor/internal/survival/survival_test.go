package survival

import (
	"strings"
	"testing"
	"time"
)

func TestSurvival(t *testing.T) {
	for _, tc := range []struct {
		s         Limits
		unbounded bool
		statement string
		warning   string
	}{
		{Limits{10 * time.Second, time.Hour, 2 * time.Second}, false,
			"a frozen controller's boxes die within 10s + 250ms; a failed watch ends at 1h0m0s + 2s", ""},
		{Limits{0, time.Hour, 2 * time.Second}, false,
			"a frozen controller's boxes live until the deadline (no heartbeat); a failed watch ends at 1h0m0s + 2s", "--heartbeat 0"},
		{Limits{10 * time.Second, 0, 2 * time.Second}, false,
			"a frozen controller's boxes die within 10s + 250ms; a failed watch never ends (no deadline)", ""},
		{Limits{0, 0, 2 * time.Second}, true,
			"a frozen controller's boxes live for ever (no heartbeat, no deadline); a failed watch never ends (no deadline)", "--heartbeat 0 and --deadline 0"},
	} {
		if got := tc.s.Unbounded(); got != tc.unbounded {
			t.Errorf("%+v: unbounded %v", tc.s, got)
		}
		if got := tc.s.Statement(250 * time.Millisecond); got != tc.statement {
			t.Errorf("%+v: statement\n got %q\nwant %q", tc.s, got, tc.statement)
		}
		if got := tc.s.Warning(); (tc.warning == "") != (got == "") || !strings.Contains(got, tc.warning) {
			t.Errorf("%+v: warning %q, want one naming %q", tc.s, got, tc.warning)
		}
	}
}
