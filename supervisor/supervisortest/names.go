package supervisortest

import (
	"deathwatch/supervisor/internal/instance"
	"deathwatch/supervisor/internal/launchid"
	"deathwatch/supervisor/internal/netpolicy"
)

// NewLaunchID is a launch id as the supervisor makes one, for a test
// that names a box of its own.
func NewLaunchID() string { return launchid.New() }

// ProbeInstance is the instance the staging probe's box runs under, for
// a test that looks for it.
func ProbeInstance(inst string) string { return instance.Probe(inst) }

// BridgeNetworkWarning is the line exec says once a box of --network
// bridge exists.
const BridgeNetworkWarning = netpolicy.BridgeWarning
