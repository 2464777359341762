package shared

import (
	"crypto/sha256"
	"math/rand"
	"testing"
)

// sha256Paths runs f once per block function this CPU can run: the SHA
// instructions (skipped, saying so, where the CPU has none) and the
// pure-Go block, which every other CPU runs.
func sha256Paths(t *testing.T, f func(t *testing.T)) {
	hw := sha256HW
	t.Cleanup(func() { sha256HW = hw })
	t.Run("hw", func(t *testing.T) {
		if !hw {
			t.Skip("this CPU has no SHA instructions (or the purego tag is set): the pure-Go block is all there is")
		}
		sha256HW = true
		f(t)
	})
	t.Run("generic", func(t *testing.T) {
		sha256HW = false
		f(t)
	})
	sha256HW = hw
}

// sha256Chunks hashes b written in pieces cut at the given offsets.
func sha256Chunks(b []byte, cuts ...int) []byte {
	h, at := newSHA256(), 0
	for _, c := range cuts {
		if c > at && c < len(b) {
			h.Write(b[at:c])
			at = c
		}
	}
	h.Write(b[at:])
	return h.Sum(nil)
}

func checkSHA256(t *testing.T, b []byte, cuts ...int) {
	t.Helper()
	want := sha256.Sum256(b)
	if got := sha256Chunks(b, cuts...); string(got) != string(want[:]) {
		t.Fatalf("%d bytes cut at %v: %x, want %x", len(b), cuts, got, want)
	}
}

// Every length from 0 to 1024 (each padding case, one and several
// blocks, one write and three), then random lengths up to 4 MiB in
// random pieces, against crypto/sha256.
func TestSHA256Lengths(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	b := make([]byte, 4<<20)
	rng.Read(b)
	sha256Paths(t, func(t *testing.T) {
		for n := 0; n <= 1024; n++ {
			checkSHA256(t, b[:n])
			checkSHA256(t, b[:n], n/3, n/3+1, 2*n/3+64)
		}
		for i := 0; i < 20; i++ {
			n := rng.Intn(len(b) + 1)
			checkSHA256(t, b[:n], rng.Intn(n+1), rng.Intn(n+1), rng.Intn(n+1))
		}
		checkSHA256(t, b)
	})
}

// Sum does not disturb the running hash: writing on after a Sum gives
// the digest of everything written.
func TestSHA256SumThenWrite(t *testing.T) {
	b := make([]byte, 300)
	for i := range b {
		b[i] = byte(i)
	}
	sha256Paths(t, func(t *testing.T) {
		h := newSHA256()
		for i := range b {
			h.Write(b[i : i+1])
			want := sha256.Sum256(b[:i+1])
			if got := h.Sum(nil); string(got) != string(want[:]) {
				t.Fatalf("after %d bytes: %x, want %x", i+1, got, want)
			}
		}
	})
}

// FuzzSHA256: any input, written in two pieces cut anywhere, hashes the
// same on the SHA instructions, on the pure-Go block and in crypto/sha256.
func FuzzSHA256(f *testing.F) {
	f.Add([]byte(""), uint16(0))
	f.Add([]byte("abc"), uint16(1))
	f.Add(make([]byte, 55), uint16(55))
	f.Add(make([]byte, 64), uint16(63))
	f.Add(make([]byte, 1000), uint16(130))
	hw := sha256HW
	f.Cleanup(func() { sha256HW = hw })
	f.Fuzz(func(t *testing.T, b []byte, cut uint16) {
		want := sha256.Sum256(b)
		for _, on := range []bool{hw, false} {
			sha256HW = on
			if got := sha256Chunks(b, int(cut)); string(got) != string(want[:]) {
				t.Fatalf("%d bytes cut at %d, SHA instructions %v: %x, want %x", len(b), cut, on, got, want)
			}
		}
		sha256HW = hw
	})
}

// BenchmarkSHA256Paths: MB/s of 1 MiB writes on each block function and
// in crypto/sha256 (what the supervisor links), side by side.
func BenchmarkSHA256Paths(b *testing.B) {
	buf := make([]byte, 1<<20)
	hw := sha256HW
	defer func() { sha256HW = hw }()
	run := func(name string, on bool) {
		b.Run(name, func(b *testing.B) {
			if on && !hw {
				b.Skip("this CPU has no SHA instructions")
			}
			sha256HW = on
			b.SetBytes(int64(len(buf)))
			h := newSHA256()
			for i := 0; i < b.N; i++ {
				h.Write(buf)
			}
		})
	}
	run("hw", true)
	run("generic", false)
	b.Run("crypto", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		h := sha256.New()
		for i := 0; i < b.N; i++ {
			h.Write(buf)
		}
	})
}
