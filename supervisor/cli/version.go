package cli

import (
	"fmt"
	"runtime"

	"deathwatch/shared"
)

// VersionCmd is `supervisor version`.
type VersionCmd struct {
	JSON bool `help:"Print JSON." name:"json"`
}

// Run is `supervisor version`.
func (v *VersionCmd) Run(c *cmdContext) error {
	if v.JSON {
		fmt.Fprintf(c.stdout, `{"version":%q,"protocol":%d,"go":%q}`+"\n", shared.Version, shared.ProtocolVersion, runtime.Version())
		return nil
	}
	fmt.Fprintf(c.stdout, "supervisor %s (protocol %d, %s)\n", shared.Version, shared.ProtocolVersion, runtime.Version())
	return nil
}
