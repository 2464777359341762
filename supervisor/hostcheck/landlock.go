package hostcheck

import (
	"fmt"

	"deathwatch/shared/landlock"
)

// landlockStatus says what the host kernel's Landlock gives the agent's
// domain (the watcher limits its writes and scopes it where the ABI
// allows; below WriteABI it says so per box, below ScopeABI only this
// line does). A box in a VM (sbx, Docker Desktop) runs on the VM's
// kernel, not this one.
func landlockStatus() string {
	return landlockLine(landlock.ABI())
}

// landlockLine is the line for an ABI probe's result. Pure: tested
// without a kernel.
func landlockLine(abi int, err error) string {
	what := fmt.Sprintf("ABI %d", abi)
	if err != nil {
		abi, what = 0, fmt.Sprintf("none (%v; landlock must be in the lsm= list)", err)
	}
	writes := "the agent's writes limited to the box's writable paths"
	if abi < landlock.WriteABI {
		writes = fmt.Sprintf("the agent's writes not limited (needs ABI %d, Linux 6.2)", landlock.WriteABI)
	}
	scopes := "its abstract unix sockets and signals scoped to the box"
	if abi < landlock.ScopeABI {
		scopes = fmt.Sprintf("its abstract unix sockets and signals not scoped (needs ABI %d, Linux 6.12)", landlock.ScopeABI)
	}
	line := what + ": " + writes + ", " + scopes
	if abi < landlock.ScopeABI {
		line += "; --require-landlock refuses such a host"
	}
	return line
}
