package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// --allow-host-network reaches the runtime (native refuses --network
// host without it).
func TestExecAllowHostNetwork(t *testing.T) {
	w := filepath.Join(t.TempDir(), "watcher")
	os.WriteFile(w, []byte("x"), 0o755)
	for _, c := range []struct {
		flag []string
		want bool
	}{{nil, false}, {[]string{"--allow-host-network"}, true}} {
		args := append([]string{"exec", "--runtime", "native", "--watcher", w, "--network", "host"}, c.flag...)
		o, err := parseExec(t, append(args, "--", "true"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if o.AllowHostNetwork != c.want || o.Network != "host" {
			t.Errorf("%v: AllowHostNetwork %v network %q, want %v host", c.flag, o.AllowHostNetwork, o.Network, c.want)
		}
	}
}
