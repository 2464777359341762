//go:build linux && !purego

package shared

import "golang.org/x/sys/unix"

// The Armv8 SHA2 block function (sha256_arm64.s), used when the kernel
// says the CPU has the instructions: HWCAP_SHA2 in the auxiliary vector.

//go:noescape
func sha256BlockARM(h *[8]uint32, p []byte, k *[64]uint32)

const atHWCap, hwcapSHA2 = 16, 1 << 6 // AT_HWCAP; HWCAP_SHA2 (arm64)

var sha256HW = hasSHA2()

func hasSHA2() bool {
	auxv, _ := unix.Auxv()
	for _, kv := range auxv {
		if kv[0] == atHWCap {
			return kv[1]&hwcapSHA2 != 0
		}
	}
	return false
}

func sha256BlockHW(h *[8]uint32, p []byte) { sha256BlockARM(h, p, &sha256K) }
