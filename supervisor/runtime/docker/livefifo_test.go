//go:build linux

package docker

import (
	"context"
	"os"
	"strings"
	"testing"
)

// A live FIFO is offered by a docker daemon that listens as the
// supervisor's uid (here: the test's own fake) and runs its boxes' root
// as that uid: rootful without userns-remap (for a root supervisor), or
// rootless (its user is uid 0 of its namespace). A userns-remap daemon, rootful or rootless,
// and podman get none.
func TestLiveFIFOOffered(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kind     string
		security []string
		keyed    bool
		keeps    bool
	}{
		{"rootful", "docker", []string{"name=seccomp,profile=default"}, true, os.Geteuid() == 0},
		{"rootless", "docker", []string{"name=seccomp,profile=default", "name=rootless"}, true, true},
		{"rootful userns-remap", "docker", []string{"name=seccomp,profile=default", "name=userns"}, true, false},
		{"rootless userns-remap", "docker", []string{"name=rootless", "name=userns"}, true, false},
		{"podman", "podman", []string{"name=rootless"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			f.server = "Docker/20.10.24+dfsg1 (linux)"
			f.info = map[string]any{"SecurityOptions": tc.security}
			e := f.engine()
			e.Kind = tc.kind
			ctx := context.Background()
			key, ok := e.LiveKey(ctx)
			if ok != tc.keyed || ok && !strings.Contains(key, f.sock) {
				t.Fatalf("LiveKey = %q, %v; want offered %v, naming the socket %s", key, ok, tc.keyed, f.sock)
			}
			if !ok {
				return
			}
			if keeps, err := e.LiveIDs(ctx); err != nil || keeps != tc.keeps {
				t.Errorf("LiveIDs = %v, %v; want %v", keeps, err, tc.keeps)
			}
		})
	}
}
