package kerneltests

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
	"deathwatch/supervisor"
	_ "deathwatch/supervisor/runtime/docker"
)

// TestEscapeLabelSmuggle (weaker spot): docker ps joins labels with
// commas, so a user label value such as "a,io.deathwatch.nonce=x" read
// back as the box's nonce. The attacker controls one --label value; the
// runtime's List, on the real engine, must report the real nonce.
func TestEscapeLabelSmuggle(t *testing.T) {
	for _, engine := range []string{"docker", "podman"} {
		t.Run(engine, func(t *testing.T) {
			img := ktest.DockerImage(t, engine)
			name := boxName(t)
			instance := "ktest-smuggle-" + name
			args := []string{"create", "--name", name,
				"--label", shared.LabelManaged + "=true", "--label", shared.LabelInstance + "=" + instance,
				"--label", shared.LabelLaunchID + "=" + name, "--label", shared.LabelNonce + "=real",
				"--label", "task=a," + shared.LabelNonce + "=x," + shared.LabelLaunchID + "=other",
				"--entrypoint", "/bin/true", img}
			if out, err := exec.Command(engine, args...).CombinedOutput(); err != nil {
				t.Fatalf("%s create: %v: %s", engine, err, out)
			}
			t.Cleanup(func() { exec.Command(engine, "rm", "-f", name).Run() })
			rt, err := supervisor.NewRuntime(engine, supervisor.RuntimeConfig{})
			if err != nil {
				t.Fatal(err)
			}
			ls, err := rt.List(context.Background(), instance)
			if err != nil || len(ls) != 1 {
				t.Fatalf("list: %+v %v", ls, err)
			}
			lb := ls[0].Labels
			t.Logf("labels as listed: %v", lb)
			if lb[shared.LabelNonce] != "real" || lb[shared.LabelLaunchID] != name {
				t.Errorf("nonce %q launch id %q: a user label's value shadowed the box's own (want real, %s)", lb[shared.LabelNonce], lb[shared.LabelLaunchID], name)
			}
			if !strings.HasPrefix(lb["task"], "a") {
				t.Errorf("the user's label: %q", lb["task"])
			}
		})
	}
}
