package hostcheck

import (
	"fmt"

	"deathwatch/shared/landlock"
)

// landlockStatus says what the host kernel's Landlock gives the agent's
// domain (the watcher scopes it where the ABI allows, and says nothing
// where it does not: this line is where an operator learns it). A box
// in a VM (sbx, Docker Desktop) runs on the VM's kernel, not this one.
func landlockStatus() string {
	return landlockLine(landlock.ABI())
}

// landlockLine is the line for an ABI probe's result. Pure: tested
// without a kernel.
func landlockLine(abi int, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("none (%v): boxes run without the Landlock layer; abstract unix sockets and signals are not scoped to the box (needs ABI %d, Linux 6.12, landlock in the lsm= list)", err, landlock.ScopeABI)
	case abi < landlock.ScopeABI:
		return fmt.Sprintf("ABI %d: boxes run without the Landlock layer; abstract unix sockets and signals are not scoped to the box (needs ABI %d, Linux 6.12)", abi, landlock.ScopeABI)
	}
	return fmt.Sprintf("ABI %d: the agent's abstract unix sockets and signals are scoped to its box", abi)
}
