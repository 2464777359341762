package kerneltests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/shared/landlock"
	"deathwatch/supervisor"
	"deathwatch/supervisor/hostcheck"
)

func (r *rig) doctor(args ...string) (int, hostcheck.DoctorReport, string) {
	r.T.Helper()
	argv := append([]string{"--instance", r.Instance, "--journal", r.JournalDir(), "doctor", "--json"}, args...)
	return supervisorJSON[hostcheck.DoctorReport](r, argv...)
}

func doctorTable(rep hostcheck.DoctorReport) string {
	var b strings.Builder
	hostcheck.WriteDoctorTable(&b, &rep)
	return b.String()
}

func runtimeRow(rep hostcheck.DoctorReport, name string) hostcheck.DoctorRuntime {
	for _, r := range rep.Runtimes {
		if r.Name == name {
			return r
		}
	}
	return hostcheck.DoctorRuntime{}
}

// landlockWant is doctor's Landlock line on a kernel of Landlock ABI
// abi: what the box's domain limits, and each wall a kernel below 6.12
// lacks named with the ABI and the Linux release that brings it.
func landlockWant(abi int) string {
	if abi >= landlock.ScopeABI {
		return fmt.Sprintf("ABI %d: the agent's writes limited to the box's writable paths, its abstract unix sockets and signals scoped to the box", abi)
	}
	writes := "the agent's writes limited to the box's writable paths"
	if abi < landlock.WriteABI {
		writes = "the agent's writes not limited (needs ABI 3, Linux 6.2)"
	}
	return fmt.Sprintf("ABI %d: %s, its abstract unix sockets and signals not scoped (needs ABI 6, Linux 6.12); --require-landlock refuses such a host", abi, writes)
}

// doctor on every runtime under the required posture: the runtime is
// usable, the watcher is found (and in the test image, with the host's
// version), the staging directory is proven bind-visible, the proof
// passes, exit 0.
func TestDoctor(t *testing.T) {
	for _, proto := range rigs(t) {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.setup(t)
			args := []string{"--runtime", r.Runtime, "--trials", "2"}
			if r.Image != "" {
				args = append(args, "--image", r.Image)
			}
			if r.User == "" && r.Runtime != "native" {
				args = append(args, "--allow-rootful")
			}
			t0 := time.Now()
			code, rep, stderr := r.doctor(args...)
			t.Logf("%s (%v):\n%s", r.Name, time.Since(t0).Round(time.Second), doctorTable(rep))
			if code != 0 || !rep.OK || len(rep.Problems) > 0 {
				t.Errorf("exit %d, ok %v, problems %v\n%s", code, rep.OK, rep.Problems, stderr)
			}
			if len(rep.Runtimes) != len(supervisor.RuntimeNames()) || rep.Selected != r.Runtime || rep.Cgroup == "" {
				t.Errorf("runtimes %+v, selected %q, cgroup %q", rep.Runtimes, rep.Selected, rep.Cgroup)
			}
			if abi, err := landlock.ABI(); err != nil || rep.Landlock != landlockWant(abi) {
				t.Errorf("landlock %q, want %q; the kernel's ABI %d (%v)", rep.Landlock, landlockWant(abi), abi, err)
			}
			row := runtimeRow(rep, r.Runtime)
			if !row.Usable || row.Version == "" {
				t.Errorf("%s row: %+v", r.Runtime, row)
			}
			if r.User != "" && r.Runtime != "native" && row.Mode != "rootless" {
				t.Errorf("rootless podman reported as %q", row.Mode)
			}
			if r.User != "" && r.Runtime == "native" && row.Mode != "unprivileged" {
				t.Errorf("unprivileged native reported as %q", row.Mode)
			}
			if r.User == "" && r.Runtime != "native" && row.Mode != "rootful" {
				t.Errorf("rootful engine reported as %q", row.Mode)
			}
			if !rep.HostWatcher.Present || !strings.Contains(rep.HostWatcher.Version, "protocol") {
				t.Errorf("host watcher %+v", rep.HostWatcher)
			}
			if r.Image != "" && (rep.ImageWatcher == nil || !rep.ImageWatcher.Present || rep.ImageWatcher.Version != rep.HostWatcher.Version) {
				t.Errorf("image watcher %+v (host %s)", rep.ImageWatcher, rep.HostWatcher.Version)
			}
			if rep.Staging == nil || rep.Staging.Mode != "bind" {
				t.Errorf("staging %+v", rep.Staging)
			}
			if rep.Proof == nil || !rep.Proof.Pass || len(rep.Proof.Rows) != 8 {
				t.Errorf("proof %+v", rep.Proof)
			}
			for _, inst := range []string{r.Instance + ".prove", r.Instance + ".doctor"} {
				if b := r.boxes(inst); len(b) != 0 {
					t.Errorf("boxes of %s left: %v", inst, b)
				}
				for _, e := range r.entries(inst) {
					if e.Open() {
						t.Errorf("journal entry %s of %s open (%s)", e.LaunchID, inst, e.State)
					}
				}
			}
		})
	}
}

// A rootful engine without --allow-rootful: reported refused, the
// required posture is not met (exit 243), nothing was started; the
// preferred posture with native available is met without a proof.
func TestDoctorRefusesRootful(t *testing.T) {
	rigs := rigs(t)
	r := *rigs[0] // docker, as root
	r.setup(t)
	code, rep, _ := r.doctor("--runtime", "docker", "--image", r.Image)
	t.Logf("\n%s", doctorTable(rep))
	if code != shared.ExitRefused || rep.OK {
		t.Errorf("exit %d, ok %v", code, rep.OK)
	}
	row := runtimeRow(rep, "docker")
	if row.Usable || !strings.Contains(row.Status, "--allow-rootful") {
		t.Errorf("docker row %+v", row)
	}
	if rep.Proof != nil || rep.Staging != nil {
		t.Errorf("a refused runtime was used: proof %v staging %v", rep.Proof, rep.Staging)
	}
	if len(rep.Problems) == 0 || !strings.Contains(strings.Join(rep.Problems, " "), "docker is not usable") {
		t.Errorf("problems %v", rep.Problems)
	}
	code, rep, _ = r.doctor("--posture", "preferred", "--skip-proof")
	if code != 0 || !rep.OK || rep.Selected != "native" {
		t.Errorf("preferred: exit %d ok %v selected %q problems %v", code, rep.OK, rep.Selected, rep.Problems)
	}
}

// The rootless Docker user has Podman on PATH too, and the image only
// in its Docker store: --runtime auto (exec and doctor) passes its
// rootless Podman over, says so on one line, and runs the box on
// rootless Docker.
func TestAutoPicksRootlessDocker(t *testing.T) {
	r := *rigs(t, "docker-rootless")[0]
	r.setup(t)
	ktest.RequireCmd(t, "podman")
	if err := r.Command(nil, "podman", "image", "exists", r.Image).Run(); err == nil {
		t.Fatalf("%s's podman store has %s: the test needs it only in docker's", r.User, r.Image)
	}
	argv := []string{"--instance", r.Instance, "--journal", r.JournalDir(), "exec", "--runtime", "auto", "--image", r.Image, "--", "echo", "ran"}
	cmd := r.Command(nil, r.Bin.Supervisor, argv...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("exec --runtime auto as %s: %v\n%s", r.User, err, stderr.String())
	if err != nil || stdout.String() != "ran\n" {
		t.Fatalf("exec: %v, stdout %q", err, stdout.String())
	}
	if s := stderr.String(); !strings.Contains(s, "--runtime auto chose docker (rootless, image "+r.Image+" present)") || !strings.Contains(s, "not found in podman") {
		t.Errorf("exec's stderr does not say that auto chose docker over podman for the image:\n%s", s)
	}
	code, rep, serr := r.doctor("--runtime", "auto", "--image", r.Image, "--posture", "preferred", "--skip-proof")
	t.Logf("\n%s", doctorTable(rep))
	if code != 0 || !rep.OK || rep.Selected != "docker" || !strings.Contains(rep.Chosen, "chose docker (rootless") {
		t.Errorf("doctor: exit %d ok %v selected %q chosen %q problems %v\n%s", code, rep.OK, rep.Selected, rep.Chosen, rep.Problems, serr)
	}
	if row := runtimeRow(rep, "podman"); row.NoImage == "" {
		t.Errorf("podman row says nothing of the missing image: %+v", row)
	}
	// Without --image no engine's store is asked: the line says so
	// instead of claiming an image present.
	_, rep, serr = r.doctor("--runtime", "auto", "--posture", "preferred", "--skip-proof")
	if !strings.Contains(rep.Chosen, "no image checked: pass the controller's --image") || strings.Contains(rep.Chosen, "present") {
		t.Errorf("doctor without --image: chosen %q\n%s", rep.Chosen, serr)
	}
}
