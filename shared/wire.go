package shared

import (
	"encoding/binary"
	"math"
)

// The payloads are a flat sequence of fields: unsigned varints, and
// strings as a varint length followed by the bytes. Decoding never
// panics and allocates a bounded multiple of the payload it was given
// (a count is checked against the bytes left before anything is made).
// Only the shortest (canonical) varint is accepted, so every payload
// has exactly one encoding.

type enc struct{ b []byte }

// u64 and i64 are called, not inlined: inlined with their varint loop
// at every field of every message they made the watcher, which links
// every marshaller, 10 KiB larger, and the kernel maps that binary in
// whole (resident in every box).
//
//go:noinline
func (e *enc) u64(v uint64) { e.b = binary.AppendUvarint(e.b, v) }

//go:noinline
func (e *enc) i64(v int64) { e.b = binary.AppendVarint(e.b, v) }

func (e *enc) str(s string) { e.u64(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) boolean(v bool) {
	if v {
		e.u64(1)
	} else {
		e.u64(0)
	}
}
func (e *enc) strs(ss []string) {
	e.u64(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}

type dec struct {
	b    []byte
	what string
	err  error
}

func (d *dec) fail(field, why string) {
	if d.err == nil {
		d.err = &ProtocolError{Reason: d.what + ": field " + field + ": " + why}
	}
}

func (d *dec) u64(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(field, "bad varint")
		return 0
	}
	if n > 1 && d.b[n-1] == 0 {
		d.fail(field, "non-canonical varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) u32(field string) uint32 {
	v := d.u64(field)
	if v > math.MaxUint32 {
		d.fail(field, "out of range")
		return 0
	}
	return uint32(v)
}

// i64 undoes binary.AppendVarint's zig-zag over an unsigned varint.
func (d *dec) i64(field string) int64 {
	ux := d.u64(field)
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

func (d *dec) boolean(field string) bool {
	switch d.u64(field) {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail(field, "not a boolean")
	return false
}

func (d *dec) str(field string) string {
	n := d.u64(field)
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail(field, "length "+utoa(n)+" exceeds the "+itoa(len(d.b))+" bytes left")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *dec) strs(field string) []string {
	n := d.u64(field)
	if d.err != nil {
		return nil
	}
	// Every string takes at least one byte, which bounds the count.
	if n > uint64(len(d.b)) {
		d.fail(field, "count "+utoa(n)+" exceeds the "+itoa(len(d.b))+" bytes left")
		return nil
	}
	out := make([]string, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		out = append(out, d.str(field))
	}
	return out
}

func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = &ProtocolError{Reason: d.what + ": " + itoa(len(d.b)) + " trailing bytes"}
	}
	return d.err
}
