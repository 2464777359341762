// Package defaultbounds says in words the bounds a box gets when it
// asks for none (doctor's and a runtime's report).
package defaultbounds

import (
	"fmt"
	"strings"

	"deathwatch/supervisor"
)

// Describe says the bounds a box gets when it asks for none: pids
// and memory where the runtime enforces them (else why it cannot: then
// an explicit --pids-limit or --memory is refused), a read-only root,
// and the bounded /tmp and /dev/shm.
func Describe(pids, memory bool, why string) []string {
	var b, none []string
	if pids {
		b = append(b, fmt.Sprintf("pids %d (--pids-limit)", supervisor.DefaultPidsLimit))
	} else {
		none = append(none, "pids")
	}
	if memory {
		b = append(b, fmt.Sprintf("memory %d MiB, no swap (--memory)", supervisor.DefaultMemory>>20))
	} else {
		none = append(none, "memory")
	}
	if len(none) > 0 {
		b = append(b, "no "+strings.Join(none, " or ")+" bound: "+why+"; --pids-limit and --memory are refused")
	}
	return append(b, "root read-only (--read-write-root)", fmt.Sprintf("/tmp tmpfs %d MiB", supervisor.TmpfsBytes>>20), fmt.Sprintf("/dev/shm %d MiB", supervisor.ShmBytes>>20))
}
