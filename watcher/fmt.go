package watcher

import "strconv"

// The watcher builds its messages without fmt, whose reflection would
// be a tenth of the PID-1 binary (and of its resident memory: the
// kernel maps a small binary in nearly whole).

func itoa(n int) string { return strconv.Itoa(n) }
