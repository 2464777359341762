package crashpoint

import "testing"

func TestCrashpointIsInert(t *testing.T) {
	// Without the variable a crash point is a no-op (the test would stop
	// itself otherwise).
	saved := pointAt
	defer func() { pointAt = saved }()
	pointAt = ""
	At(AfterJournal)
	pointAt = "elsewhere"
	At(AfterJournal)
}
