package docker

import (
	"context"
	"strings"
	"testing"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
)

func TestDaemonLimitsRefuse(t *testing.T) {
	all := daemonLimits{MemoryLimit: true, PidsLimit: true, CgroupDriver: "cgroupfs"}
	none := daemonLimits{CgroupDriver: "none"}
	for _, tc := range []struct {
		name         string
		l            daemonLimits
		memory, pids int64
		want         string // "" = accepted
	}{
		{"no limits asked", none, 0, 0, ""},
		{"both enforced", all, 64 << 20, 64, ""},
		{"no cgroups: memory", none, 64 << 20, 0, "would not enforce --memory ("},
		{"no cgroups: both", none, 64 << 20, 64, "--memory and --pids-limit"},
		{"pids only missing", daemonLimits{MemoryLimit: true, CgroupDriver: "cgroupfs"}, 64 << 20, 64, "would not enforce --pids-limit"},
		{"driver none despite the flags", daemonLimits{MemoryLimit: true, PidsLimit: true, CgroupDriver: "none"}, 0, 64, "--pids-limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.refuse("docker", tc.memory, tc.pids)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if exitcode.Of(err, 0) != shared.ExitRefused || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "/info") {
				t.Fatalf("got %v, want a refusal with %q", err, tc.want)
			}
		})
	}
}

func TestLimitWarning(t *testing.T) {
	discarded := "Your kernel does not support memory limit capabilities or the cgroup is not mounted. Limitation discarded."
	for _, tc := range []struct {
		name         string
		memory, pids int64
		warnings     []string
		refused      bool
	}{
		{"no warnings", 64 << 20, 0, nil, false},
		{"limit discarded", 64 << 20, 0, []string{discarded}, true},
		{"pids discarded", 0, 64, []string{"Your kernel does not support pids limit capabilities or the cgroup is not mounted. PIDs limit discarded."}, true},
		{"no limit asked", 0, 0, []string{discarded}, false},
		{"another warning", 64 << 20, 0, []string{"Published ports are discarded when using host network mode"}, false},
	} {
		err := limitWarning("docker", tc.memory, tc.pids, tc.warnings)
		if got := exitcode.Of(err, 0) == shared.ExitRefused; got != tc.refused {
			t.Errorf("%s: %v, refused %v want %v", tc.name, err, got, tc.refused)
		}
	}
}

// The daemon's /info says it has no cgroups: a limit is refused before
// the create; a create reply that warns a limit away removes the box.
func TestAPILimitsFromDaemon(t *testing.T) {
	f := newFakeAPI(t)
	f.rootless = true
	f.info = map[string]any{"MemoryLimit": false, "PidsLimit": false, "CgroupDriver": "none"}
	e := f.engine()
	ctx := context.Background()
	if _, err := e.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.CheckLimits(64<<20, 0); exitcode.Of(err, 0) != shared.ExitRefused || !strings.Contains(err.Error(), "MemoryLimit false") {
		t.Errorf("memory limit on a daemon without cgroups: %v", err)
	}
	if err := e.CheckLimits(0, 0); err != nil {
		t.Errorf("no limits: %v", err)
	}
	f.warnings = []string{"Your kernel does not support pids limit capabilities or the cgroup is not mounted. PIDs limit discarded."}
	b := &supervisor.Box{Name: "dw-1", Image: "img", WatcherPath: "/w", PidsLimit: 64, Labels: map[string]string{shared.LabelInstance: "ci"}}
	if err := e.Create(ctx, b); exitcode.Of(err, 0) != shared.ExitRefused {
		t.Errorf("create with a discarded limit: %v", err)
	}
	if there, err := e.Exists(ctx, b); err != nil || there {
		t.Errorf("the box made without its limit is still there (%v)", err)
	}
}
