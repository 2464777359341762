//go:build !purego

package shared

// The SHA extensions block function (sha256_amd64.s), used when the CPU
// has them: CPUID leaf 7 EBX bit 29 (SHA), with SSSE3 (PSHUFB, PALIGNR)
// and SSE4.1 (PBLENDW) from leaf 1 ECX bits 9 and 19. crypto/sha256
// would find them too but costs the watcher its FIPS module; the probe
// is these few lines.

//go:noescape
func sha256BlockSHANI(h *[8]uint32, p []byte, k *[64]uint32)

func cpuid(leaf, sub uint32) (a, b, c, d uint32)

var sha256HW = hasSHANI()

func hasSHANI() bool {
	if max, _, _, _ := cpuid(0, 0); max < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	_, ebx7, _, _ := cpuid(7, 0)
	return ecx1&(1<<9) != 0 && ecx1&(1<<19) != 0 && ebx7&(1<<29) != 0
}

func sha256BlockHW(h *[8]uint32, p []byte) { sha256BlockSHANI(h, p, &sha256K) }
