//go:build unix

package docker

import (
	"os"
	"path/filepath"
	"syscall"

	"deathwatch/supervisor"
)

// dropRunDirs removes box b's cidfile folders: real folders (not links)
// in the temporary folder that this user owns. Another user's folder of
// the same name is left alone; os.RemoveAll follows no link inside.
func dropRunDirs(b *supervisor.Box) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), runDirPattern(b)))
	for _, d := range dirs {
		st, err := os.Lstat(d)
		if err != nil || !st.IsDir() {
			continue
		}
		if s, ok := st.Sys().(*syscall.Stat_t); !ok || int(s.Uid) != os.Geteuid() {
			continue
		}
		os.RemoveAll(d)
	}
}
