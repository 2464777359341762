//go:build amd64 && !purego

package shared

import "golang.org/x/sys/cpu"

// The SHA extensions (CPUID.7.0:EBX bit 29) hash about ten times faster
// than the plain Go block below: they set the speed of every copy
// through the watcher.

func cpuid7ebx() uint32

//go:noescape
func blockSHANI(dig *sha256d, p []byte)

var useSHANI = cpu.X86.HasAVX && cpu.X86.HasSSE41 && cpu.X86.HasSSSE3 && cpuid7ebx()&(1<<29) != 0

func (d *sha256d) block(p []byte) {
	if useSHANI {
		blockSHANI(d, p)
		return
	}
	d.blockGeneric(p)
}
