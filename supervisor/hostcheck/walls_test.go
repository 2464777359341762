package hostcheck

import (
	"bytes"
	"strings"
	"testing"
)

// The selected runtime's walls are printed, one line each; another
// runtime's are not.
func TestDoctorTableWalls(t *testing.T) {
	rep := &DoctorReport{Selected: "native", Posture: PosturePreferred, OK: true, Runtimes: []DoctorRuntime{
		{Name: "docker", Status: "usable", Walls: []string{"docker's note"}},
		{Name: "native", Status: "usable", Walls: []string{"--network host is refused unless --allow-host-network", "oom note"}},
	}}
	var b bytes.Buffer
	WriteDoctorTable(&b, rep)
	out := b.String()
	for _, want := range []string{"walls:            --network host is refused unless --allow-host-network\n", "walls:            oom note\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "docker's note") {
		t.Errorf("doctor table prints the walls of a runtime it did not select:\n%s", out)
	}
}
