package cli

import (
	"os"
	"syscall"
)

// execSignals on Windows: Ctrl-C (os.Interrupt) and the console's
// close/logoff/shutdown events, which Go delivers as SIGTERM, stop the
// agent; there is no SIGUSR1/SIGUSR2 to pass on.
var execSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// ignoredSignals: Windows has no SIGPIPE.
var ignoredSignals []os.Signal
