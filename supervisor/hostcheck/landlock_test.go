package hostcheck

import (
	"errors"
	"strings"
	"testing"
)

func TestLandlockLine(t *testing.T) {
	for _, c := range []struct {
		abi  int
		err  error
		want string
	}{
		{7, nil, "ABI 7: the agent's abstract unix sockets and signals are scoped to its box"},
		{6, nil, "ABI 6: the agent's"},
		{5, nil, "ABI 5: boxes run without the Landlock layer"},
		{0, errors.New("landlock_create_ruleset: function not implemented"), "none (landlock_create_ruleset: function not implemented): boxes run without the Landlock layer"},
	} {
		if got := landlockLine(c.abi, c.err); !strings.HasPrefix(got, c.want) {
			t.Errorf("landlockLine(%d, %v) = %q, want %q…", c.abi, c.err, got, c.want)
		}
	}
}
