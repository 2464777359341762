package bench

import (
	"debug/elf"
	"fmt"
	"os"
	"testing"

	"deathwatch/kernel-tests/ktest"
)

// TestBenchSize: size of the static watcher beside the other inits.
func TestBenchSize(t *testing.T) {
	requireBench(t)
	bins := ktest.Build(t)
	files := []struct{ name, path string }{
		{"watcher", bins.Watcher},
		{"tini-static", tiniStatic},
		{"catatonit", ktest.RequireCmd(t, "catatonit")},
		{"dumb-init", ktest.RequireCmd(t, "dumb-init")},
		{"supervisor", bins.Supervisor},
	}
	s := newSection(t, rankSize, "binary size (watcher and supervisor built as the Makefile does: CGO_ENABLED=0 -trimpath -ldflags \"-s -w -buildid=\", both with GOEXPERIMENT="+ktest.BuildGOEXPERIMENT+")",
		"binary", "bytes", "MiB", "linked", "path")
	var watcherSize int64
	for _, f := range files {
		st, err := os.Stat(f.path)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		linked := "static"
		if e, err := elf.Open(f.path); err != nil {
			t.Fatalf("%s: read as ELF: %v", f.path, err)
		} else {
			for _, p := range e.Progs {
				if p.Type == elf.PT_INTERP {
					linked = "dynamic"
				}
			}
			e.Close()
		}
		if f.name == "watcher" {
			watcherSize = st.Size()
			if linked != "static" {
				t.Errorf("the watcher is dynamically linked: it would not run in a FROM scratch image")
			}
		}
		s.Row(f.name, fmt.Sprint(st.Size()), fmt.Sprintf("%.2f", mib(st.Size())), linked, f.path)
		s.Set(f.name, map[string]any{"bytes": st.Size(), "linked": linked, "path": f.path})
	}
	s.Target("static watcher size", mib(watcherSize), 2.0, "MiB")
	s.Log()
}
