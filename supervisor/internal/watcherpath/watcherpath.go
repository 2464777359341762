// Package watcherpath finds the host's watcher binary that a box
// bind-mounts.
package watcherpath

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"deathwatch/supervisor/exitcode"
)

// Find resolves --watcher: the flag, else `watcher` next to the
// supervisor's own binary (self), else on PATH.
func Find(flag, self string) (string, error) {
	check := func(p string) (string, error) {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		st, err := os.Stat(abs)
		if err != nil {
			return "", err
		}
		if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not an executable file", abs)
		}
		return abs, nil
	}
	if flag != "" {
		p, err := check(flag)
		if err != nil {
			return "", exitcode.Usage("--watcher: %w", err)
		}
		return p, nil
	}
	if self != "" {
		if p, err := check(filepath.Join(filepath.Dir(self), "watcher")); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("watcher"); err == nil {
		if p, err := check(p); err == nil {
			return p, nil
		}
	}
	return "", exitcode.Usage("no watcher binary: put `watcher` next to the supervisor or on PATH, or pass --watcher PATH or --watcher-in-image PATH")
}
