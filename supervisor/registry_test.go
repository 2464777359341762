package supervisor

import (
	"context"
	"strings"
	"testing"
	"time"

	"deathwatch/supervisor/exitcode"
)

func TestRegistry(t *testing.T) {
	if _, ok := Lookup("memrt"); !ok {
		t.Fatal("the test runtime is not registered")
	}
	// memrt has AutoRank 0: never picked by auto.
	for _, n := range AutoOrder() {
		if n == "memrt" {
			t.Error("a runtime without an auto rank is in auto's order")
		}
	}
	if !strings.Contains(strings.Join(RuntimeNames(), ","), "memrt") {
		t.Errorf("names %v", RuntimeNames())
	}
	defer func() {
		if recover() == nil {
			t.Error("a second registration of memrt did not panic")
		}
	}()
	Register(Descriptor{Name: "memrt", New: func(RuntimeConfig) (Runtime, error) { return theMem, nil }})
}

func TestNewRuntimeUnknown(t *testing.T) {
	_, err := NewRuntime("no-such", RuntimeConfig{})
	if exitcode.Of(err, 0) != 240 || !strings.Contains(err.Error(), "not one of") {
		t.Errorf("unknown runtime: %v", err)
	}
	if _, ok := initMode([]string{"no-such-mode"}); ok {
		t.Error("an unknown first argument is a hidden mode")
	}
	rt, err := NewRuntime("memrt", RuntimeConfig{})
	if err != nil || rt.Name() != "memrt" {
		t.Fatalf("memrt: %v %v", rt, err)
	}
	if ok, _ := rt.Exists(context.Background(), &Box{Name: "nothing"}); ok {
		t.Error("a box that was never made exists")
	}
}

// TestVolatile: what the lifecycle tells the journal about a runtime is
// its CapVolatile declaration; an unknown runtime's entries are synced.
func TestVolatile(t *testing.T) {
	Register(Descriptor{Name: "volatiletest", Caps: CapVolatile, Bounds: Bounds{Dead: time.Second, Removed: time.Second},
		New: func(RuntimeConfig) (Runtime, error) { return nil, nil }})
	Register(Descriptor{Name: "durabletest", Bounds: Bounds{Dead: time.Second, Removed: time.Second},
		New: func(RuntimeConfig) (Runtime, error) { return nil, nil }})
	for rt, want := range map[string]bool{"volatiletest": true, "durabletest": false, "no-such-runtime": false} {
		if got := Volatile(rt); got != want {
			t.Errorf("Volatile(%q) = %v, want %v", rt, got, want)
		}
	}
}
