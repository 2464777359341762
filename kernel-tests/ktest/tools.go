package ktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	toolsMu sync.Mutex
	tools   = map[string]*tool{}
)

type tool struct {
	once sync.Once
	path string
	err  error
}

// ToolPath builds the program ./kernel-tests/ktest/NAME once per test
// process into a world-readable folder (an unprivileged agent runs it)
// and returns its path. The folder is the same for every run, so runs
// leave nothing behind; a build lands there by rename, so concurrent
// test processes do not trip over each other. Where there is no Go (the
// VM rig's guests, kernel-tests/vm), DEATHWATCH_KTEST_TOOLS names the
// folder that holds the programs built beforehand.
func ToolPath(t testing.TB, name string) string {
	t.Helper()
	if dir := os.Getenv("DEATHWATCH_KTEST_TOOLS"); dir != "" {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("the %s program, built beforehand: %v (DEATHWATCH_KTEST_TOOLS=%s)", name, err, dir)
		}
		return path
	}
	toolsMu.Lock()
	b := tools[name]
	if b == nil {
		b = &tool{}
		tools[name] = b
	}
	toolsMu.Unlock()
	b.once.Do(func() { b.path, b.err = buildTool(name) })
	if b.err != nil {
		t.Fatalf("build the %s program: %v", name, b.err)
	}
	return b.path
}

func buildTool(name string) (string, error) {
	dir := filepath.Join(os.TempDir(), "deathwatch-ktest-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, name+"-*.tmp")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	pkg := "./kernel-tests/ktest/" + name
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp.Name(), pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{pkg: pkg, out: string(out), err: err}
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	return path, os.Rename(tmp.Name(), path)
}
