package supervisor

import (
	"slices"
	"testing"

	"deathwatch/shared"
)

// TestWritablePaths: what the agent may write in, per box.
func TestWritablePaths(t *testing.T) {
	base := append([]string{"/tmp", "/dev/shm", "/proc"}, agentDevices...)
	for _, c := range []struct {
		name string
		box  Box
		want []string
	}{
		{"no mounts: the box's tmpfs, /proc, devices", Box{}, base},
		{"a writable root limits nothing", Box{ReadWriteRoot: true, Mounts: []Mount{{Source: "/h", Target: "/w"}}}, nil},
		{"read-write mounts, not read-only ones", Box{Mounts: []Mount{{Source: "/h", Target: "/w"}, {Source: "/r", Target: "/r", ReadOnly: true}}}, append(slices.Clone(base), "/w")},
		{"a bridged mount where it is (the link's source)", Box{
			Mounts: []Mount{{Source: "/Users/me/p", Target: "/workspace"}},
			Links:  []shared.Link{{Target: "/workspace", Source: "/Users/me/p"}},
		}, append(slices.Clone(base), "/Users/me/p")},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := WritablePaths(&c.box); !slices.Equal(got, c.want) {
				t.Errorf("WritablePaths = %q, want %q", got, c.want)
			}
		})
	}
}
