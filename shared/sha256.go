package shared

import (
	"encoding/binary"
	"hash"
)

// A plain SHA-256 (FIPS 180-4) for the copy manifests. crypto/sha256
// links Go's FIPS module (its DRBG, AES, SHA-3 and self-tests: about a
// quarter of a megabyte) into the PID-1 binary; this is a few
// kilobytes: the block function on the CPU's SHA instructions where it
// has them (sha256_amd64.s, as fast as crypto/sha256; sha256_arm64.s on
// Linux) and in pure Go elsewhere (sha256_generic.go). The supervisor, where size does not
// matter, plugs in crypto/sha256 (NewSHA256); all give the same
// digests (TestSHA256Lengths, FuzzSHA256).

// NewSHA256 makes the hash every copy digest uses.
var NewSHA256 = func() hash.Hash { return newSHA256() }

const sha256Size, sha256Block = 32, 64

type sha256d struct {
	h   [8]uint32
	x   [sha256Block]byte
	nx  int
	len uint64
}

var sha256IV = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

var sha256K = [64]uint32{
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

func newSHA256() *sha256d { d := &sha256d{}; d.Reset(); return d }

func (d *sha256d) Reset()         { d.h, d.nx, d.len = sha256IV, 0, 0 }
func (d *sha256d) Size() int      { return sha256Size }
func (d *sha256d) BlockSize() int { return sha256Block }

func (d *sha256d) Write(p []byte) (int, error) {
	n := len(p)
	d.len += uint64(n)
	if d.nx > 0 {
		c := copy(d.x[d.nx:], p)
		d.nx += c
		p = p[c:]
		if d.nx < sha256Block {
			return n, nil
		}
		d.block(d.x[:])
		d.nx = 0
	}
	if m := len(p) &^ (sha256Block - 1); m > 0 {
		d.block(p[:m])
		p = p[m:]
	}
	d.nx = copy(d.x[:], p)
	return n, nil
}

func (d *sha256d) Sum(in []byte) []byte {
	c := *d
	var pad [sha256Block + 8]byte
	pad[0] = 0x80
	k := 55 - int(c.len%64)
	if k < 0 {
		k += 64
	}
	bitLen := c.len << 3
	c.Write(pad[:1+k])
	binary.BigEndian.PutUint64(pad[:8], bitLen)
	c.Write(pad[:8])
	for _, v := range c.h {
		in = binary.BigEndian.AppendUint32(in, v)
	}
	return in
}

// block runs the compression function over whole blocks of p (len(p)
// is a multiple of 64): on the CPU's SHA instructions where it has them
// (sha256HW, set at start; tests clear it to run the pure-Go block).
func (d *sha256d) block(p []byte) {
	if sha256HW {
		sha256BlockHW(&d.h, p)
		return
	}
	sha256BlockGeneric(&d.h, p)
}
