package kerneltests

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"deathwatch/supervisor"
)

// TestSbxExecWalls (issue 29, the walls on sbx): a sandbox's root is
// the VM's own and writable, so the agent left files wherever the
// template let uid 1000 write (its /var/tmp), and a sandbox made with no
// --memory got sbx's own default size. Now the sandbox is made with the
// default memory bound (sbx create --memory 4g) and the agent writes
// only in its workspace, /tmp and /dev/shm (the watcher's Landlock
// rules in the VM's kernel); --read-write-root gives it the VM's root
// as the template has it.
func TestSbxExecWalls(t *testing.T) {
	r := newSbxRig(t)
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	agent := `w() { (echo x > "$2") 2>/dev/null && echo "$1=ok" || echo "$1=refused"; }; w ws /workspace/f; w tmp /tmp/f; w shm /dev/shm/f; w vartmp /var/tmp/dw-f`
	for _, c := range []struct {
		name   string
		extra  []string
		vartmp string
	}{
		{"default", nil, "refused"},
		{"read-write-root", []string{"--read-write-root"}, "ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(r.s.Calls(t))
			res := runCmd(r.exec(nil, append(c.extra, "--mount", ws+":/workspace", "--", "sh", "-c", agent)...))
			t.Logf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
			if res.code != 0 {
				t.Fatalf("exit %d, want 0", res.code)
			}
			got := lines(res.stdout)
			want := map[string]string{"ws": "ok", "tmp": "ok", "shm": "ok", "vartmp": c.vartmp}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s=%q, want %q", k, got[k], v)
				}
			}
			if _, err := os.Stat(filepath.Join(ws, "f")); err != nil {
				t.Errorf("the agent's file did not reach the host workspace: %v", err)
			}
			creates := 0
			for _, call := range r.s.Calls(t)[before:] {
				if len(call.Argv) > 1 && call.Argv[1] == "create" {
					creates++
					if i := slices.Index(call.Argv, "--memory"); i < 0 || i+1 == len(call.Argv) || call.Argv[i+1] != "4g" {
						t.Errorf("sbx create %q: no --memory 4g (the default bound, %d MiB)", call.Argv, supervisor.DefaultMemory>>20)
					}
				}
			}
			if creates != 1 {
				t.Errorf("%d sbx create calls, want 1", creates)
			}
			r.assertClean(c.name)
		})
	}
}
