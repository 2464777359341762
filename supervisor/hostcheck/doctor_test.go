package hostcheck

import (
	"strings"
	"testing"
)

func TestWriteDoctorTable(t *testing.T) {
	rep := &DoctorReport{
		Runtimes: []DoctorRuntime{
			{Name: "docker", Present: true, Version: "20.10", Mode: "rootful", Status: "refused: rootful (...); pass --allow-rootful to accept it"},
			{Name: "sbx", Status: "not installed"},
		},
		Cgroup: "v2 (unified)", Selected: "native", Posture: PostureRequired,
		HostWatcher: DoctorWatcher{Where: "host", Path: "/bin/watcher", Present: true, Version: "0.1.0 (protocol 1)"},
		Staging:     &DoctorStaging{Dir: "/s", Mode: "bind", Detail: "read back"},
		Problems:    []string{"prove-deathwatch was skipped"}, ProofSkipped: true,
	}
	var b strings.Builder
	WriteDoctorTable(&b, rep)
	out := b.String()
	for _, want := range []string{"docker   yes", "--allow-rootful", "sbx", "v2 (unified)", "/s → bind", "posture required: NOT met", "- prove-deathwatch was skipped"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
