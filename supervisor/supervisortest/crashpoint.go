package supervisortest

import "deathwatch/supervisor/internal/crashpoint"

// The crash points of supervisor/internal/crashpoint, for kernel-tests
// (outside supervisor/, so they cannot import it): a test sets
// CrashPointEnv=point in the supervisor's environment and SIGKILLs it
// once it stopped there.
const (
	CrashPointEnv     = crashpoint.Env
	CrashBeforeWatch  = crashpoint.BeforeWatch
	CrashAfterJournal = crashpoint.AfterJournal
	CrashInRun        = crashpoint.InRun
	CrashAfterCreate  = crashpoint.AfterCreate
	CrashAfterStage   = crashpoint.AfterStage
	CrashAfterStart   = crashpoint.AfterStart
	CrashRemoving     = crashpoint.Removing
	CrashBeforeFetch  = crashpoint.BeforeFetch
)
