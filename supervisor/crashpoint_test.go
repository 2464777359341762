package supervisor

import "testing"

func TestCrashpointIsInert(t *testing.T) {
	// Without the variable a crash point is a no-op (the test would stop
	// itself otherwise).
	saved := crashPointAt
	defer func() { crashPointAt = saved }()
	crashPointAt = ""
	crashpoint(CrashAfterJournal)
	crashPointAt = "elsewhere"
	crashpoint(CrashAfterJournal)
}
