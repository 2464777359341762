package seccomp

import (
	"bytes"
	"os"
	"testing"
)

// TestTableIsFresh checks that the precompiled filters Default returns
// are what Program compiles now: a change to the policy or the numbers
// needs `go generate ./shared/seccomp`.
func TestTableIsFresh(t *testing.T) {
	for _, userns := range []bool{false, true} {
		if !bytes.Equal(Default(userns), Marshal(Program(Options{AllowUserns: userns}))) {
			t.Errorf("Default(%v) differs from a fresh compile; run go generate ./shared/seccomp", userns)
		}
	}
	src, err := os.ReadFile("table.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, Table()) {
		t.Error("table.go differs from what gen_table.go writes; run go generate ./shared/seccomp")
	}
}

// TestDefaultIsACopy checks that a caller changing its filter leaves
// the next launch's filter alone.
func TestDefaultIsACopy(t *testing.T) {
	a := Default(false)
	a[0] ^= 0xff
	if bytes.Equal(a, Default(false)) {
		t.Fatal("Default returns shared memory")
	}
}
