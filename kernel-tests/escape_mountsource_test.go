package kerneltests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// TestEscapeMountPlantedLink (issue 29, breach 2): the engines got a
// --mount source as a path string and followed a link in it. Box 1
// leaves rootlink -> / in the workspace it may write; box 2 with
// --mount WS/rootlink:/tmp/host got the host's root read-write on
// Docker and Podman (and wrote into the host's /tmp). Now every source
// is opened by descriptor with no symlink followed before the engine
// sees it, and one below a folder a box may write to (where a link
// could be swapped in after the check) is refused too: 243, no box.
// The binds are nosuid and nodev where the engine takes it (Podman,
// native); Docker's agent runs with no_new_privs.
func TestEscapeMountPlantedLink(t *testing.T) {
	esc := ktest.ToolPath(t, "escape")
	for _, proto := range rigs(t, append(append([]string(nil), engineRigs...), "native-unprivileged")...) {
		t.Run(proto.Name, func(t *testing.T) {
			r := *proto
			r.Setup(t, "kt")
			t.Cleanup(func() { r.removeLeftovers() })
			ws := filepath.Join(r.Dir, "ws")
			os.Mkdir(ws, 0o777)
			os.Chmod(ws, 0o777) // the workspace every box of the test may write to
			os.Mkdir(filepath.Join(ws, "sub"), 0o777)
			os.Chmod(filepath.Join(ws, "sub"), 0o777)
			marker := filepath.Join("/tmp", "dw-escape-link-"+newMarker(t))
			t.Cleanup(func() { os.Remove(marker) })

			tool := "--mount=" + filepath.Dir(esc) + ":" + escapeDir + ":ro"
			res := runCmd(r.supervisor(nil, tool, "--mount", ws+":/tmp/ws", "--", "sh", "-c",
				`ln -s / /tmp/ws/rootlink && echo planted; `+escapeDir+`/escape mountopts /tmp/ws `+escapeDir+`; grep NoNewPrivs /proc/self/status`))
			t.Logf("box 1: exit %d\n%s%s", res.code, res.stdout, res.stderr)
			if !strings.Contains(res.stdout, "planted") {
				t.Fatalf("box 1 could not plant the link: exit %d %q %q", res.code, res.stdout, res.stderr)
			}
			got := lines(res.stdout)
			for _, p := range []string{"/tmp/ws", escapeDir} {
				if r.Runtime == "docker" {
					if !strings.Contains(res.stdout, "NoNewPrivs:\t1") {
						t.Errorf("the Docker agent runs without no_new_privs: a set-id program of its mount %s would work", p)
					}
				} else if !hasOpts(got["mountopts:"+p], "nosuid", "nodev") {
					t.Errorf("the box's mount %s has options %q, want nosuid,nodev", p, got["mountopts:"+p])
				}
			}

			cases := []struct{ name, source, want string }{
				{"through the planted link", filepath.Join(ws, "rootlink"), "symlink"},
				{"below the link", filepath.Join(ws, "rootlink", "tmp"), "symlink"},
				// The native runtime mounts the tree it opened, so no link
				// swapped in later reaches it: a folder below one a box
				// writes is its to mount ("" is accepted).
				{"below a folder a box writes", filepath.Join(ws, "sub"), "writable by group or others"},
			}
			if r.Runtime == "native" {
				cases[2].want = ""
			}
			for _, c := range cases {
				res := runCmd(r.supervisor(nil, "--mount", c.source+":/tmp/host", "--", "sh", "-c",
					`echo pwned > /tmp/host/`+strings.TrimPrefix(marker, "/")+`; echo pwned > /tmp/host/x; echo ran`))
				t.Logf("box 2 (%s): exit %d %s%s", c.name, res.code, res.stdout, res.stderr)
				if _, err := os.Lstat(marker); err == nil {
					t.Errorf("box 2 (%s) wrote %s on the host", c.name, marker)
				}
				if c.want == "" {
					if res.code != 0 || !strings.Contains(res.stdout, "ran") {
						t.Errorf("box 2 (%s): exit %d %q, want it run", c.name, res.code, res.stdout)
					}
					continue
				}
				if strings.Contains(res.stdout, "ran") {
					t.Errorf("box 2 (%s) ran", c.name)
				}
				// The refusal's line is the first but a warning (rootful
				// Docker's about its shared ids).
				first := ""
				for _, l := range strings.Split(res.stderr, "\n") {
					if !strings.HasPrefix(l, "supervisor: warning: ") {
						first = l
						break
					}
				}
				if res.code != shared.ExitRefused || !strings.Contains(first, c.want) {
					t.Errorf("box 2 (%s): exit %d, stderr %q; want %d and a line that says %q", c.name, res.code, res.stderr, shared.ExitRefused, c.want)
				}
			}
		})
	}
}
