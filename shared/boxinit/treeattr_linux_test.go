package boxinit

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TreeAttr: a bind step's flags become the tree's mount attributes.
func TestTreeAttr(t *testing.T) {
	for _, c := range []struct {
		readOnly bool
		flags    uintptr
		want     uint64
	}{
		{false, 0, 0},
		{true, 0, unix.MOUNT_ATTR_RDONLY},
		{false, unix.MS_NOSUID | unix.MS_NODEV, unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV},
		{true, unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV},
	} {
		if got := TreeAttr(c.readOnly, c.flags); got != c.want {
			t.Errorf("TreeAttr(%v, %#x) = %#x, want %#x", c.readOnly, c.flags, got, c.want)
		}
	}
}
