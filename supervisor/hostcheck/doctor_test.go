package hostcheck

import (
	"strings"
	"testing"
	"time"

	"deathwatch/supervisor"
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

// Three runtimes in auto's order as autoSelect's table sees them: two
// engines and one without a daemon.
func init() {
	for _, d := range []supervisor.Descriptor{
		{Name: "t-podman", Daemon: true, AutoRank: 1},
		{Name: "t-docker", Daemon: true, AutoRank: 2},
		{Name: "t-native", AutoRank: 3},
	} {
		d.New = func(supervisor.RuntimeConfig) (supervisor.Runtime, error) { return nil, nil }
		d.Bounds = supervisor.Bounds{Dead: time.Second, Removed: time.Second}
		supervisor.Register(d)
	}
}

// doctor's auto picks what exec's would: a rootless engine that has the
// image, else one without a daemon, else a rootful one with the image.
func TestAutoSelect(t *testing.T) {
	rootless := func(name string) DoctorRuntime {
		return DoctorRuntime{Name: name, Usable: true, Mode: "rootless", Status: "usable"}
	}
	rootful := func(name string) DoctorRuntime {
		return DoctorRuntime{Name: name, Usable: true, Mode: "rootful", Status: "usable (rootful, allowed by --allow-rootful)"}
	}
	noImage := func(r DoctorRuntime) DoctorRuntime {
		r.NoImage = "image img not found in " + r.Name
		return r
	}
	unusable := DoctorRuntime{Name: "t-native", Status: "not installed"}
	for _, tc := range []struct {
		name       string
		rows       []DoctorRuntime
		want, line string
	}{
		{"first rootless", []DoctorRuntime{rootless("t-podman"), rootless("t-docker"), unusable}, "t-podman", "chose t-podman (rootless, image img present)"},
		{"image only in the second", []DoctorRuntime{noImage(rootless("t-podman")), rootless("t-docker"), unusable}, "t-docker", "chose t-docker (rootless, image img present); passed over: image img not found in t-podman"},
		{"rootless before rootful", []DoctorRuntime{rootful("t-podman"), rootless("t-docker"), unusable}, "t-docker", "chose t-docker (rootless"},
		{"no daemon before rootful", []DoctorRuntime{rootful("t-podman"), noImage(rootless("t-docker")), {Name: "t-native", Usable: true, Mode: "root"}}, "t-native", "chose t-native (no daemon)"},
		{"rootful with the image", []DoctorRuntime{noImage(rootful("t-podman")), rootful("t-docker"), unusable}, "t-docker", "chose t-docker (rootful, accepted by --allow-rootful, image img present)"},
		{"none", []DoctorRuntime{noImage(rootless("t-podman")), {Name: "t-docker", Status: "refused: rootful"}, unusable}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, line := autoSelect(tc.rows, "img")
			if got != tc.want || !strings.Contains(line, tc.line) {
				t.Errorf("autoSelect = %q, %q; want %q and a line with %q", got, line, tc.want, tc.line)
			}
		})
	}
	// doctor without --image asked no engine for one: the line says so.
	got, line := autoSelect([]DoctorRuntime{rootless("t-podman"), unusable}, "")
	if want := "chose t-podman (rootless, no image checked: pass the controller's --image to choose by it, as exec does)"; got != "t-podman" || !strings.Contains(line, want) {
		t.Errorf("autoSelect without an image = %q, %q; want t-podman and a line with %q", got, line, want)
	}
}
