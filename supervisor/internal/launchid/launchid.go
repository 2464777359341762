// Package launchid makes the random names of a launch: its id and its
// nonce.
package launchid

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// New is a sortable, unique launch id: UTC time and 32 random bits.
func New() string {
	return time.Now().UTC().Format("20060102-150405") + "-" + Hex(4)
}

// Hex is n random bytes in hex (nonces, launch ids).
func Hex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // cannot happen on Linux ≥ 3.17
	}
	return hex.EncodeToString(b)
}
