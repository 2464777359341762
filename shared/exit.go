package shared

// The exit-status table. Both binaries exit with these; exec --help
// prints ExitTable and the README's table is generated from it.
//
//	0-125    the agent's own exit code
//	126      the command was found but could not be executed
//	127      the command was not found
//	128+N    the agent died of signal N (N = 1..64)
//	240-249  deathwatch's own outcomes, below
//
// The reserved block sits above 128+64, so it never collides with a
// signal status. An OOM kill has no code of its own: it keeps 137
// (128+9) and the exit record's reason says oom (see ReasonOOM).
const (
	ExitCannotExec = 126
	ExitNotFound   = 127
	ExitSignalBase = 128

	ExitUsage          = 240 // a bad flag, argument or spec: nothing was started
	ExitEngine         = 241 // the runtime is missing or not running
	ExitImage          = 242 // the image or template was not found
	ExitRefused        = 243 // an unsafe or impossible combination (a rootful engine, host network, agent uid 0 or the watcher's own, no kill domain, no free id slot, a limit not enforced)
	ExitSetupFailed    = 244 // the box or the agent could not be set up
	ExitLivenessLost   = 245 // the control stream reached EOF, went silent or broke
	ExitDeadline       = 246 // the in-box deadline passed
	ExitBlocked        = 247 // reconcile found boxes it cannot prove it owns
	ExitCopyFailed     = 248 // a copy-in or copy-out failed verification or was refused; nothing of it was kept
	ExitControllerLost = 249 // the controller died (its process, or --controller-fd's EOF) or stopped reading the output (EPIPE): the box was ended
)

// ExitMeaning describes one row of the table.
type ExitMeaning struct {
	Code    string
	Meaning string
}

// ExitTable is the table as rows, for --help and the README.
var ExitTable = []ExitMeaning{
	{"0-125", "the agent's own exit code"},
	{"126", "the command was found but could not be executed"},
	{"127", "the command was not found"},
	{"128+N", "the agent died of signal N"},
	{"240", "usage: a bad flag, argument or spec; nothing was started"},
	{"241", "engine: the runtime is missing or not running"},
	{"242", "image: the image or template was not found"},
	{"243", "refused: an unsafe or impossible combination (a rootful engine without --allow-rootful, --network host without --allow-host-network, agent uid 0 or the watcher's own, no kill domain, no free host id slot, a limit the runtime would not enforce)"},
	{"244", "setup failed: the box or the agent could not be set up"},
	{"245", "liveness lost: the control stream reached EOF, went silent or broke"},
	{"246", "deadline: the in-box deadline passed"},
	{"247", "blocked: reconcile found boxes it cannot prove it owns"},
	{"248", "copy failed: a copy-in or copy-out did not verify (reason verify-failed) or was refused (copy-refused); nothing of it was kept"},
	{"249", "controller lost: the controller that started the supervisor died (reason controller-lost) or its output could not be written (output-lost); the box was ended"},
}

// SignalStatus is the status for death by signal n.
func SignalStatus(n int) int { return ExitSignalBase + n }
