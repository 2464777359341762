package docker

import "deathwatch/supervisor"

// dropRunDirs has nothing to do: podman on Windows is a machine (a
// remote engine), never a one-step local run.
func dropRunDirs(*supervisor.Box) {}
