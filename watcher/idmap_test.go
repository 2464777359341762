package watcher

import "testing"

func TestUnmappedIn(t *testing.T) {
	rootless := "         0       2346          1\n         1     165536      65535\n"
	for _, tc := range []struct {
		name     string
		uid, gid uint32
		want     string
	}{
		{"inside", 1000, 1000, ""},
		{"last id", 65535, 65535, ""},
		{"uid outside", 70000, 1000, "uid 70000 (the box maps uids 0-0, 1-65535)"},
		{"both outside", 70000, 65536, "uid 70000 (the box maps uids 0-0, 1-65535) and gid 65536 (the box maps gids 0-0, 1-65535)"},
	} {
		if got := unmappedIn(rootless, rootless, tc.uid, tc.gid); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := unmappedIn("0 0 4294967295\n", "0 0 4294967295\n", 70000, 70000); got != "" {
		t.Errorf("the initial namespace maps every id: %q", got)
	}
}
