//go:build !amd64 || purego

package shared

func (d *sha256d) block(p []byte) { d.blockGeneric(p) }
