package kerneltests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
)

// TestReadmeMainCommand runs the README's first command (hostcheck.RunDemo) the way
// `make demo` does — the built supervisor, through its CLI — and checks
// what a reader is told to expect: the agent's output and exit code,
// the time the tree survived, and nothing left behind.
func TestReadmeMainCommand(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	cmd := exec.Command(bins.Supervisor, "demo")
	out, err := cmd.CombinedOutput()
	t.Logf("supervisor demo:\n%s", out)
	if err != nil {
		t.Fatalf("supervisor demo: %v", err)
	}
	for _, want := range []string{"exit code:  7", "SIGKILL controller -> agent tree dead after", "left: 0 processes, 0 cgroups, 0 open journal entries"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("supervisor demo output lacks %q", want)
		}
	}
}

// readmeExample is one runnable block of the README: a fenced block
// whose info string is "sh test" or "python test", and the "text output"
// block after it, which is what its script prints on stdout.
type readmeExample struct {
	line   int    // the opening fence's line, 1-based
	lang   string // sh or python
	script string
	output string
}

// readmeExamples finds the README's runnable blocks. A runnable block
// without its output block, or a fence left open, is an error: the
// README would promise what no test checks.
func readmeExamples(doc string) ([]readmeExample, error) {
	lines := strings.Split(doc, "\n")
	var exs []readmeExample
	// block reads the fenced block opening at lines[i] and returns its
	// body and the index after its closing fence.
	block := func(i int) (string, int, error) {
		var body []string
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				return strings.Join(body, "\n") + "\n", j + 1, nil
			}
			body = append(body, lines[j])
		}
		return "", 0, fmt.Errorf("README.md:%d: the block is never closed", i+1)
	}
	for i := 0; i < len(lines); i++ {
		info, ok := strings.CutPrefix(lines[i], "```")
		if !ok || info == "" {
			continue
		}
		f := strings.Fields(info)
		if len(f) != 2 || f[1] != "test" {
			_, next, err := block(i)
			if err != nil {
				return nil, err
			}
			i = next - 1
			continue
		}
		if f[0] != "sh" && f[0] != "python" {
			return nil, fmt.Errorf("README.md:%d: a runnable block is sh or python, not %s", i+1, f[0])
		}
		script, next, err := block(i)
		if err != nil {
			return nil, err
		}
		for next < len(lines) && strings.TrimSpace(lines[next]) == "" {
			next++
		}
		if next >= len(lines) || strings.TrimSpace(lines[next]) != "```text output" {
			return nil, fmt.Errorf("README.md:%d: a runnable block needs a ```text output block right after it", i+1)
		}
		output, after, err := block(next)
		if err != nil {
			return nil, err
		}
		exs = append(exs, readmeExample{line: i + 1, lang: f[0], script: script, output: output})
		i = after - 1
	}
	return exs, nil
}

func TestReadmeExamplesParse(t *testing.T) {
	doc := "intro\n```sh\nnot run\n```\n\n```sh test\necho hi\n```\n\n```text output\nhi\n```\n```python test\nprint(1)\n```\n```text output\n1\n```\n"
	exs, err := readmeExamples(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := []readmeExample{{line: 6, lang: "sh", script: "echo hi\n", output: "hi\n"}, {line: 13, lang: "python", script: "print(1)\n", output: "1\n"}}
	if fmt.Sprint(exs) != fmt.Sprint(want) {
		t.Errorf("got %+v, want %+v", exs, want)
	}
	for _, bad := range []string{"```sh test\necho\n```\nno output block\n", "```sh test\nnever closed\n", "```go test\nx\n```\n```text output\n```\n"} {
		if _, err := readmeExamples(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestReadmeExamples runs every runnable block of the README as a user
// would paste it: a script run from the checkout's top folder, with the
// built binaries first on PATH and a journal of its own, and checks that
// it exits 0 and prints exactly the output block the README shows.
// Among them must be boxes on the native runtime and on Docker, and the
// Python controller.
func TestReadmeExamples(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	python := ktest.RequireCmd(t, "python3")
	ktest.RequireCmd(t, "docker")
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("docker info: %v: %s (run kernel-tests/provision.sh)", err, out)
	}
	doc, err := os.ReadFile(filepath.Join(ktest.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	exs, err := readmeExamples(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	covers := map[string]bool{}
	for _, ex := range exs {
		for _, rt := range []string{"native", "docker"} {
			if strings.Contains(ex.script, "--runtime "+rt) || strings.Contains(ex.script, `"--runtime", "`+rt+`"`) {
				covers[rt] = true
			}
		}
		covers[ex.lang] = true
	}
	for _, want := range []string{"native", "docker", "python"} {
		if !covers[want] {
			t.Errorf("README.md has no runnable example of %s", want)
		}
	}
	for _, ex := range exs {
		t.Run(fmt.Sprintf("line%d", ex.line), func(t *testing.T) {
			dir := t.TempDir()
			name, interp := "example.sh", "sh"
			if ex.lang == "python" {
				name, interp = "example.py", python
			}
			script := filepath.Join(dir, name)
			if err := os.WriteFile(script, []byte(ex.script), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, interp, script)
			cmd.Dir = ktest.RepoRoot()
			cmd.Env = append(os.Environ(),
				"PATH="+bins.Dir+string(os.PathListSeparator)+os.Getenv("PATH"),
				"DEATHWATCH_JOURNAL="+filepath.Join(dir, "journal"))
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			err := cmd.Run()
			t.Logf("README.md:%d (%s) in %v\n--- script\n%s--- stdout\n%s--- stderr\n%s", ex.line, ex.lang, time.Since(start).Round(time.Millisecond), ex.script, stdout.String(), stderr.String())
			if err != nil {
				t.Errorf("README.md:%d: the example exits with %v, want 0", ex.line, err)
			}
			if stdout.String() != ex.output {
				t.Errorf("README.md:%d: the example prints\n%s\nwant (its output block)\n%s", ex.line, stdout.String(), ex.output)
			}
		})
	}
}
