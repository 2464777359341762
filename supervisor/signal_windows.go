package supervisor

import "os"

// forwarded reports whether s is passed on to the agent: Windows has no
// SIGUSR1 or SIGUSR2 to pass on, so nothing is.
func forwarded(os.Signal) (int, bool) { return 0, false }
