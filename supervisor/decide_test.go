package supervisor

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"deathwatch/shared"
)

func TestDecide(t *testing.T) {
	exit := func(r shared.Reason, code int, msg string) *shared.Exit {
		return &shared.Exit{Reason: r, Code: code, Message: msg}
	}
	for _, tc := range []struct {
		name          string
		end           streamEnd
		tail          string
		code          int
		event, journl string
		say           string // a substring; "" = nothing said
	}{
		{"agent exited", streamEnd{exit: exit(shared.ReasonExited, 7, ""), ready: true}, "", 7, "exited", "exited", ""},
		{"agent signaled", streamEnd{exit: exit(shared.ReasonSignaled, 137, ""), ready: true}, "", 137, "signaled", "signaled", ""},
		{"watcher deadline", streamEnd{exit: exit(shared.ReasonDeadline, shared.ExitDeadline, ""), ready: true}, "", shared.ExitDeadline, "deadline", "deadline", "the deadline (1s) passed"},
		// The watcher's message is the watcher's to say (its stderr): the
		// host says the box was ended, in its own words.
		{"liveness lost with message", streamEnd{exit: exit(shared.ReasonLivenessLost, shared.ExitLivenessLost, "no frame from the host for 1s"), ready: true}, "", shared.ExitLivenessLost, "liveness-lost", "liveness-lost", "liveness lost: the watcher ended the box"},
		{"oom", streamEnd{exit: exit(shared.ReasonOOM, 137, ""), ready: true}, "", 137, "oom", "oom", "ran out of memory"},
		{"setup failed without message", streamEnd{exit: exit(shared.ReasonSetupFailed, shared.ExitSetupFailed, "")}, "", shared.ExitSetupFailed, "setup-failed", "setup-failed", "setup-failed"},
		{"first signal, agent stopped", streamEnd{exit: exit(shared.ReasonStopped, 143, ""), ready: true, signal: syscall.SIGTERM}, "", 143, "stopped", "stopped", ""},
		{"second signal ended the box", streamEnd{ready: true, signal: syscall.SIGINT, endedNow: true}, "", 130, ReasonSignaled, ReasonSupervisorSignaled, ""},
		{"second signal, watcher saw liveness loss", streamEnd{exit: exit(shared.ReasonLivenessLost, shared.ExitLivenessLost, ""), signal: syscall.SIGTERM, endedNow: true}, "", 143, ReasonSignaled, ReasonSupervisorSignaled, ""},
		// The first signal's stop was under way: the watcher's record says
		// stopped, with the KILL the second signal's end brought (it can
		// reach us before the engine client is killed, on a loaded host).
		{"second signal, watcher was stopping", streamEnd{exit: exit(shared.ReasonStopped, 137, ""), signal: syscall.SIGTERM, endedNow: true}, "", 143, ReasonSignaled, ReasonSupervisorSignaled, ""},
		{"signal, stream ended without record", streamEnd{ready: true, signal: syscall.SIGHUP}, "", 129, ReasonSignaled, ReasonSupervisorSignaled, ""},
		{"host deadline backstop", streamEnd{ready: true, endedNow: true, pastDue: true}, "", shared.ExitDeadline, "deadline", "deadline", "outlived its deadline (1s)"},
		{"stream ended after ready", streamEnd{ready: true}, "", shared.ExitLivenessLost, "liveness-lost", "liveness-lost", "without an exit record"},
		{"stream broke after ready", streamEnd{ready: true, err: errors.New("bad frame")}, "", shared.ExitLivenessLost, "liveness-lost", "liveness-lost", "broke: bad frame"},
		{"controller lost", streamEnd{exit: exit(shared.ReasonLivenessLost, shared.ExitLivenessLost, ""), ready: true, endedNow: true, lost: shared.ReasonControllerLost, lostWhy: "the controller (parent pid 42) exited"}, "", shared.ExitControllerLost, "controller-lost", "controller-lost", "parent pid 42"},
		{"controller lost after a signal", streamEnd{ready: true, signal: syscall.SIGTERM, endedNow: true, lost: shared.ReasonControllerLost, lostWhy: "gone"}, "", shared.ExitControllerLost, "controller-lost", "controller-lost", "gone"},
		{"output lost", streamEnd{ready: true, lost: shared.ReasonOutputLost, lostWhy: "write stdout: broken pipe"}, "", shared.ExitControllerLost, "output-lost", "output-lost", "broken pipe"},
		{"ended before start", streamEnd{err: errors.New("eof")}, "exec: no such file", shared.ExitSetupFailed, "setup-failed", "setup-failed", "before the agent started (eof): exec: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(tc.end, time.Second, tc.tail)
			if got.code != tc.code || got.eventReason != tc.event || got.journalReason != tc.journl {
				t.Errorf("decide = %+v; want code %d, event %q, journal %q", got, tc.code, tc.event, tc.journl)
			}
			if (tc.say == "") != (got.say == "") || !strings.Contains(got.say, tc.say) {
				t.Errorf("said %q; want %q", got.say, tc.say)
			}
		})
	}
}
