package watcher

import (
	"os/signal"
	"syscall"
	"testing"
)

func TestSignalSets(t *testing.T) {
	for _, tc := range []struct {
		sig                           syscall.Signal
		caught, notifiable, forwarded bool
	}{
		{syscall.SIGTERM, true, true, true},
		{syscall.SIGINT, true, true, true},
		{syscall.SIGWINCH, true, true, true},
		{syscall.SIGSEGV, true, true, true}, // a user's kill -SEGV; a real fault still panics
		{syscall.SIGCHLD, true, true, false},
		{syscall.SIGTTIN, true, true, false},
		{syscall.SIGTTOU, true, true, false},
		{syscall.SIGURG, false, false, false},
		{syscall.SIGPROF, false, false, true},
		{syscall.SIGKILL, false, false, true},
		{32, true, false, true}, // rawsig.go
		{33, false, false, true},
		{34, true, false, true},
		{35, true, true, true},
		{64, true, true, true},
	} {
		if got := caught(tc.sig); got != tc.caught {
			t.Errorf("caught(%d) = %v, want %v", int(tc.sig), got, tc.caught)
		}
		if got := notifiable(tc.sig); got != tc.notifiable {
			t.Errorf("notifiable(%d) = %v, want %v", int(tc.sig), got, tc.notifiable)
		}
		if got := forwarded(tc.sig); got != tc.forwarded {
			t.Errorf("forwarded(%d) = %v, want %v", int(tc.sig), got, tc.forwarded)
		}
	}
}

func TestStartIgnored(t *testing.T) {
	// The test binary starts with SIGTTOU at its default action unless
	// its caller ignored it; ignoring it now is what startIgnored reads
	// for the signals the runtime leaves alone.
	if signal.Ignored(syscall.SIGTTOU) {
		t.Skip("SIGTTOU was ignored when the test started")
	}
	if startIgnored(syscall.SIGTTOU) {
		t.Fatal("startIgnored(SIGTTOU) = true before anything ignored it")
	}
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	if !startIgnored(syscall.SIGTTOU) {
		t.Fatal("startIgnored(SIGTTOU) = false for an ignored SIGTTOU")
	}
}

func TestSpawnAttrProcessGroup(t *testing.T) {
	sys := spawnAttr(&agent{Argv: []string{"x"}, Setpgid: true, Foreground: true}).Sys
	if !sys.Setpgid || !sys.Foreground || sys.Ctty != 0 || sys.Setsid {
		t.Errorf("SysProcAttr = %+v: want Setpgid and Foreground on the agent's fd 0, no Setsid", sys)
	}
	sys = spawnAttr(&agent{Argv: []string{"x"}, Setsid: true}).Sys
	if sys.Setpgid || sys.Foreground || !sys.Setsid {
		t.Errorf("SysProcAttr = %+v: want Setsid alone (control mode)", sys)
	}
}
