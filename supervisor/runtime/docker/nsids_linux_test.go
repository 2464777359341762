package docker

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"deathwatch/supervisor"
	"deathwatch/supervisor/idslot"
)

// rootlesskit's maps for a user 2346 with subordinate ids 165536:65536.
const kitMap = "         0       2346          1\n         1     165536      65536\n"

func TestParseIDMap(t *testing.T) {
	for _, c := range []struct {
		text string
		want []idExtent
	}{
		{kitMap, []idExtent{{0, 2346, 1}, {1, 165536, 65536}}},
		{"0 0 4294967295\n", []idExtent{{0, 0, 4294967295}}},
		{"", nil},
		{"0 1000\n1 x 5\n2 3 0\n-1 5 5\n", nil}, // short, not a number, empty, negative
	} {
		if got := parseIDMap(c.text); !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseIDMap(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

// A slot of the user's subordinate ids, as the daemon's namespace names
// it: both of its ids mapped, consecutive, within nsSlotLow…nsSlotHigh-1.
func TestDaemonIDsInside(t *testing.T) {
	m := parseIDMap(kitMap)
	d := &daemonIDs{uids: m, gids: m}
	for _, c := range []struct {
		what     string
		u, g     int64
		uid, gid int64
		ok       bool
	}{
		{"first slot of the block", 165536 + 32768, 165536 + 32768, 32769, 32769, true},
		{"uid 1000's slot, below the block", 166534, 166534, 0, 0, false},
		{"the user's own id (namespace root)", 2346, 2346, 0, 0, false},
		{"last slot below 65533", 165536 + 65530, 165536 + 65530, 65531, 65531, true},
		{"the slot holding 65533", 165536 + 65532, 165536 + 65532, 0, 0, false},
		{"past the mapped range", 231072, 231072, 0, 0, false},
		{"gid unmapped", 165536 + 32768, 300000, 0, 0, false},
	} {
		uid, gid, ok := d.inside(c.u, c.g)
		if ok != c.ok || ok && (uid != c.uid || gid != c.gid) {
			t.Errorf("%s: inside(%d, %d) = %d, %d, %v; want %d, %d, %v", c.what, c.u, c.g, uid, gid, ok, c.uid, c.gid, c.ok)
		}
	}
	// A map that splits a slot's two ids apart.
	split := &daemonIDs{uids: []idExtent{{40000, 200000, 1}, {40001, 300000, 10}}, gids: m}
	if _, _, ok := split.inside(200000, 165536+32768); ok {
		t.Errorf("a slot whose second uid the namespace maps elsewhere was accepted")
	}
}

// The user's boxes take the slots the daemon's namespace names within
// the block, from the folder native boxes take theirs from; the first
// box's agent is uid 32769 there.
func TestDaemonIDSlots(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "idslots")
	r := idslot.Sub(dir, 165536, 165536, idslot.UserSlotIDs, 65536/idslot.UserSlotIDs, "test range")
	d := newDaemonIDs(parseIDMap(kitMap), parseIDMap(kitMap), r)
	if n := d.slots.Takeable(); n != 16382 {
		t.Errorf("takeable slots %d, want 16382 (namespace ids 32769-65532)", n)
	}
	e := &Engine{Kind: "docker", daemonIDs: d}
	var got []supervisor.OwnIDs
	for _, name := range []string{"a", "b"} {
		b := &supervisor.Box{Name: name}
		if err := e.ownIDs(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		got = append(got, *b.OwnIDs)
	}
	want := []supervisor.OwnIDs{
		{AgentUID: 32769, AgentGID: 32769, WatcherUID: 32770, WatcherGID: 32770},
		{AgentUID: 32771, AgentGID: 32771, WatcherUID: 32772, WatcherGID: 32772},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("box ids %v, want %v", got, want)
	}
	// The whole range (a native box's allocation) never takes them.
	if s, err := r.Allocate("native"); err != nil || s != 165536 {
		t.Errorf("a native box after them got %d (%v), want the range's first slot", s, err)
	}
}

// A namespace that maps too few of the user's ids for two slots within
// the block gets the statement instead of slots.
func TestDaemonSlots(t *testing.T) {
	r := idslot.Sub(t.TempDir(), 165536, 165536, idslot.UserSlotIDs, 65536/idslot.UserSlotIDs, "test range")
	for _, c := range []struct {
		what, uids string
		slots      int64 // 0: the statement
	}{
		{"the user's 65536", kitMap, 16382},
		{"ids up to 32772", "0 2346 1\n1 165536 32772\n", 2},
		{"ids up to 32770", "0 2346 1\n1 165536 32770\n", 0},
		{"another user's range", "0 2346 1\n1 300000 65536\n", 0},
		{"no map", "", 0},
	} {
		d, why := daemonSlots(c.uids, kitMap, r)
		switch {
		case c.slots == 0 && (d != nil || !strings.HasPrefix(why, "rootless docker: the daemon's user namespace does not map ids 32768-65532")):
			t.Errorf("%s: %v, %q; want the statement", c.what, d, why)
		case c.slots > 0 && (d == nil || d.slots.Takeable() != c.slots || why != ""):
			t.Errorf("%s: %v, %q; want %d slots", c.what, d, why, c.slots)
		}
	}
}

func TestDockerRootlessShared(t *testing.T) {
	s := dockerRootlessShared("why", "do this")
	if !strings.HasPrefix(s, "rootless docker: why, so ") || !strings.Contains(s, sameIDs) || !strings.HasSuffix(s, "; do this") {
		t.Errorf("statement %q", s)
	}
	var w strings.Builder
	e := &Engine{Kind: "docker", Stderr: &w}
	e.warnShared(supervisor.Info{Detail: s})
	e.warnShared(supervisor.Info{Detail: s})
	if w.String() != "supervisor: warning: "+s+"\n" {
		t.Errorf("said %q, want it once", w.String())
	}
}
