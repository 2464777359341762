package shared

import (
	"encoding/binary"
	"math/bits"
)

// The pure-Go block function: what runs on a CPU without SHA
// instructions. The eight rounds of a pass are written out with the
// working variables renamed instead of shifted (round r's new a and e
// land in the variables that held h and d), which leaves the compiler
// no moves to make between rounds; Ch and Maj take one operation
// fewer than their textbook forms.

func sha256BlockGeneric(hp *[8]uint32, p []byte) {
	var w [64]uint32
	for ; len(p) >= sha256Block; p = p[sha256Block:] {
		q := p[:sha256Block]
		for i := range 16 {
			w[i] = binary.BigEndian.Uint32(q[4*i:])
		}
		for i := 16; i < 64; i++ {
			v1, v2 := w[i-2], w[i-15]
			s1 := bits.RotateLeft32(v1, -17) ^ bits.RotateLeft32(v1, -19) ^ (v1 >> 10)
			s0 := bits.RotateLeft32(v2, -7) ^ bits.RotateLeft32(v2, -18) ^ (v2 >> 3)
			w[i] = s1 + w[i-7] + s0 + w[i-16]
		}
		a, b, c, d, e, f, g, h := hp[0], hp[1], hp[2], hp[3], hp[4], hp[5], hp[6], hp[7]
		for i := 0; i < 64; i += 8 {
			k, x := (*[8]uint32)(sha256K[i:]), (*[8]uint32)(w[i:])
			d, h = sha256Round(a, b, c, d, e, f, g, h, k[0]+x[0])
			c, g = sha256Round(h, a, b, c, d, e, f, g, k[1]+x[1])
			b, f = sha256Round(g, h, a, b, c, d, e, f, k[2]+x[2])
			a, e = sha256Round(f, g, h, a, b, c, d, e, k[3]+x[3])
			h, d = sha256Round(e, f, g, h, a, b, c, d, k[4]+x[4])
			g, c = sha256Round(d, e, f, g, h, a, b, c, k[5]+x[5])
			f, b = sha256Round(c, d, e, f, g, h, a, b, k[6]+x[6])
			e, a = sha256Round(b, c, d, e, f, g, h, a, k[7]+x[7])
		}
		hp[0], hp[1], hp[2], hp[3], hp[4], hp[5], hp[6], hp[7] = hp[0]+a, hp[1]+b, hp[2]+c, hp[3]+d, hp[4]+e, hp[5]+f, hp[6]+g, hp[7]+h
	}
}

// sha256Round is one round on a..h with kw = K[i]+W[i]; it returns the
// new e (d+t1) and the new a (t1+t2); the other six shift by one.
func sha256Round(a, b, c, d, e, f, g, h, kw uint32) (uint32, uint32) {
	t1 := h + (bits.RotateLeft32(e, -6) ^ bits.RotateLeft32(e, -11) ^ bits.RotateLeft32(e, -25)) + (g ^ (e & (f ^ g))) + kw
	t2 := (bits.RotateLeft32(a, -2) ^ bits.RotateLeft32(a, -13) ^ bits.RotateLeft32(a, -22)) + ((a & b) | (c & (a | b)))
	return d + t1, t1 + t2
}
