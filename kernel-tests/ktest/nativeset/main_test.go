package main

import (
	"slices"
	"testing"
)

// TestNativeSet reads the kernel tests of this checkout: tests of the
// native runtime and the watcher are in the set, those that drive an
// engine, the cluster or sbx (directly or through a helper) are not, and
// the unprivileged set is the part that runs as the test user.
func TestNativeSet(t *testing.T) {
	names, nodes, tests, err := load("../..")
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	unpriv := map[string]bool{}
	abi := map[string]int64{}
	for _, n := range names {
		why, u, a := reach(tests[n], nodes)
		in[n] = why == ""
		unpriv[n] = why == "" && u
		abi[n] = a
	}
	for _, n := range []string{"TestNativeCgroupV2", "TestEscapeOOM", "TestWatcherDeadline", "TestChainControllerKilled", "TestCrashWindowMatrix", "TestEscapeCgroupLeave"} {
		if !in[n] {
			t.Errorf("%s is not in the native set", n)
		}
	}
	for _, n := range []string{"TestSupervisorTTY", "TestSupervisorSignals", "TestKubernetesKnobs", "TestSbxExecWalls", "TestProvisionAgain", "TestEscapeAbstractSockets", "TestCopyRoundTrip", "TestProveDeathwatchDeadlineUnseen"} {
		if !slices.Contains(names, n) {
			t.Errorf("%s is not a kernel test any more; pick another engine test here", n)
		}
		if in[n] {
			t.Errorf("%s is in the native set; it needs an engine, the cluster or the machine's provisioning", n)
		}
	}
	for _, n := range []string{"TestNativeUnprivileged", "TestEscapeCgroupLeave", "TestDoctor"} {
		if !unpriv[n] {
			t.Errorf("%s is not in the unprivileged set", n)
		}
	}
	// The Landlock ABI each test requires: a kernel below it fails them.
	for n, want := range map[string]int64{"TestEscapeScopes": 6, "TestEscapeWriteLimits": 3, "TestNativeCgroupV2": 0, "TestDoctor": 0} {
		if abi[n] != want {
			t.Errorf("%s requires Landlock ABI %d by the source; want %d", n, abi[n], want)
		}
	}
	if unpriv["TestWatcherDeadline"] {
		t.Errorf("TestWatcherDeadline is in the unprivileged set; it runs no supervisor as the user")
	}
}
