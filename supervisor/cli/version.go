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

// plainVersion is the VersionCmd of args that ask for the version alone
// (`version`, `version --json`, `--version`), answered without the
// parser; ok is false for anything else, which the parser reads (and
// refuses where it must).
func plainVersion(args []string) (v VersionCmd, ok bool) {
	switch {
	case len(args) == 1 && (args[0] == "version" || args[0] == "--version"):
		return v, true
	case len(args) == 2 && args[0] == "version" && (args[1] == "--json" || args[1] == "--json=true"):
		return VersionCmd{JSON: true}, true
	}
	return v, false
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
