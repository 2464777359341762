package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The split of `supervisor exec --runtime podman` on the CLI path (one
// `podman run`): the podman argv the supervisor passes, recorded by a
// podman shim first on PATH, run (a) with `true` as entrypoint and (b)
// with the watcher as entrypoint in its tini mode (`-- true`). Beside
// the walled anchor and the supervisor, the rows then say what the
// supervisor's flags cost podman (walled → a), what the watcher costs
// (a → b), and what the supervisor process and its control stream cost
// (b → supervisor).

// podmanSplitShim records the argv of a `podman run` in $DW_ARGV (each
// argument NUL-terminated) and runs the real podman with it.
const podmanSplitShim = `#!/bin/sh
if [ "$1" = run ]; then printf '%s\0' "$@" > "$DW_ARGV"; fi
exec "$DW_PODMAN" "$@"
`

// recordPodmanRun runs `supervisor exec -- true` on rig r with the shim
// first on PATH and returns the `podman run` argv it passed (without
// the program's name).
func recordPodmanRun(t *testing.T, r *rig, env []string) []string {
	t.Helper()
	real, err := exec.LookPath("podman")
	if err != nil {
		t.Fatalf("podman split: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "podman"), []byte(podmanSplitShim), 0o755); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(dir, "argv")
	cmd := exec.Command(r.execArgs(nil, "true")[0], r.execArgs(nil, "true")[1:]...)
	cmd.Env = append(slices.Clone(env), "PATH="+dir+":"+os.Getenv("PATH"), "DW_ARGV="+rec, "DW_PODMAN="+real)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("podman split: supervisor exec through the shim: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(rec)
	if err != nil {
		t.Fatalf("podman split: the supervisor ran no `podman run` (the CLI path?): %v", err)
	}
	args := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	if len(args) == 0 || args[0] != "run" {
		t.Fatalf("podman split: recorded %q, want a `podman run`", args)
	}
	return append([]string{real}, args...)
}

// podmanSplitCandidates are (a) and (b) from the recorded argv: its
// --cidfile replaced by one that prepare removes before each run (podman
// refuses an existing one), descriptor 3 (--preserve-fds 1, the live
// pipe) /dev/null, and the entrypoint and its arguments replaced.
func podmanSplitCandidates(t *testing.T, argv []string) (a, b *candidate) {
	t.Helper()
	cid := filepath.Join(t.TempDir(), "cid")
	var head []string
	ep := -1
	for i := 0; i < len(argv); i++ {
		switch argv[i] {
		case "--cidfile":
			head = append(head, "--cidfile", cid)
			i++
			continue
		case "--entrypoint":
			ep = i
		}
		if ep >= 0 {
			break
		}
		head = append(head, argv[i])
	}
	if ep < 0 || ep+3 >= len(argv) || argv[ep+2] != "--" {
		t.Fatalf("podman split: no `--entrypoint E -- IMAGE` in %q", argv)
	}
	watcher, image := argv[ep+1], argv[ep+3]
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { null.Close() })
	prepare := func(cmd *exec.Cmd) error {
		if err := os.Remove(cid); err != nil && !os.IsNotExist(err) {
			return err
		}
		cmd.ExtraFiles = []*os.File{null}
		return nil
	}
	at := func(tail ...string) []string { return append(slices.Clone(head), tail...) }
	a = &candidate{name: "(a) the supervisor's podman run argv, entrypoint true (no watcher)", argv: at("--entrypoint", "true", "--", image), prepare: prepare}
	b = &candidate{name: "(b) the same argv, the watcher as entrypoint in its tini mode (" + watcher + " -- true)", argv: at("--entrypoint", watcher, "--", image, "--", "true"), prepare: prepare}
	return a, b
}

// podmanSplitNote says the split from the p50s: walled → a → b →
// supervisor.
func podmanSplitNote(walled, a, b, sup *candidate) string {
	ms := func(x, y *candidate) string { return fmt.Sprintf("%+.1f ms", y.stats.P50-x.stats.P50) }
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "podman (CLI path) split of the p50s: walled run → (a) %s (the supervisor's flags beyond the walls, the cidfile, the live pipe's descriptor), (a) → (b) %s (the watcher as PID 1), (b) → supervisor exec %s (the supervisor process: start-up, journal, removal, and the control stream through podman's attach)",
		ms(walled, a), ms(a, b), ms(b, sup))
	return buf.String()
}
