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
		{7, nil, "ABI 7: the agent's writes limited to the box's writable paths, its abstract unix sockets and signals scoped to the box"},
		{6, nil, "ABI 6: the agent's writes limited"},
		{5, nil, "ABI 5: the agent's writes limited to the box's writable paths, its abstract unix sockets and signals not scoped (needs ABI 6, Linux 6.12); --require-landlock refuses such a host"},
		{2, nil, "ABI 2: the agent's writes not limited (needs ABI 3, Linux 6.2), its abstract unix sockets and signals not scoped"},
		{0, errors.New("landlock_create_ruleset: function not implemented"), "none (landlock_create_ruleset: function not implemented; landlock must be in the lsm= list): the agent's writes not limited"},
	} {
		if got := landlockLine(c.abi, c.err); !strings.HasPrefix(got, c.want) {
			t.Errorf("landlockLine(%d, %v) = %q, want %q…", c.abi, c.err, got, c.want)
		}
	}
}
