package kerneltests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest"
	"deathwatch/shared"
)

// These tests assert that kernel-tests/provision.sh left a machine the
// engine tests can use: if one fails, the engine tests would fail for a
// reason that has nothing to do with deathwatch.

// runClean runs cmd and returns its stdout; it fails the test when the
// command fails or writes anything to stderr (an engine warning on every
// command would garble what the supervisor relays).
func runClean(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s: %v", strings.Join(cmd.Args, " "), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s\n(run kernel-tests/provision.sh)", strings.Join(cmd.Args, " "), err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Fatalf("%s wrote to stderr: %q (run kernel-tests/provision.sh)", strings.Join(cmd.Args, " "), stderr.String())
	}
	return stdout.String()
}

// inBox is what every test container runs: who it is, that the watcher is
// there, and that the busybox applets work.
const inBox = `id -u; test -x /usr/local/bin/watcher && echo watcher; echo hello | wc -c; grep -c . /etc/passwd >/dev/null && echo passwd`

const inBoxWant = "0\nwatcher\n6\npasswd\n"

func TestProvisionDocker(t *testing.T) {
	ktest.RequireRoot(t)
	ktest.RequireCmd(t, "docker")
	out := runClean(t, exec.Command("docker", "info", "--format", "{{.ServerVersion}} {{.CgroupVersion}}"))
	t.Logf("dockerd %s", strings.TrimSpace(out))
	img := ktest.DockerImage(t, "docker")
	if got := runClean(t, exec.Command("docker", "run", "--rm", "--network", "none", img, "/bin/sh", "-c", inBox)); got != inBoxWant {
		t.Fatalf("docker run %s printed %q, want %q", img, got, inBoxWant)
	}
	// The watcher is static: it runs in a FROM scratch image.
	if got := runClean(t, exec.Command("docker", "run", "--rm", "--network", "none", "--entrypoint", ktest.ImageWatcher, img, "--version")); strings.TrimSpace(got) == "" {
		t.Fatalf("watcher --version in %s printed nothing", img)
	}
	// stdin attach, the control stream's transport.
	cmd := exec.Command("docker", "run", "--rm", "-i", "--network", "none", img, "/bin/cat")
	cmd.Stdin = strings.NewReader("through stdin\n")
	if got := runClean(t, cmd); got != "through stdin\n" {
		t.Fatalf("docker run -i cat printed %q", got)
	}
	// A second call in the same process costs nothing and names the same image.
	if again := ktest.DockerImage(t, "docker"); again != img {
		t.Fatalf("DockerImage changed from %s to %s", img, again)
	}
}

func TestProvisionPodmanRootful(t *testing.T) {
	ktest.RequireRoot(t)
	ktest.RequireCmd(t, "podman")
	out := runClean(t, exec.Command("podman", "info", "--format", "{{.Host.Security.Rootless}} {{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}}"))
	if strings.TrimSpace(out) != "false runc cgroupfs" {
		t.Fatalf("podman info says %q, want \"false runc cgroupfs\" (run kernel-tests/provision.sh)", out)
	}
	img := ktest.DockerImage(t, "podman")
	if got := runClean(t, exec.Command("podman", "run", "--rm", "--network", "none", img, "/bin/sh", "-c", inBox)); got != inBoxWant {
		t.Fatalf("podman run %s printed %q, want %q", img, got, inBoxWant)
	}
	cmd := exec.Command("podman", "run", "--rm", "-i", "--network", "none", img, "/bin/cat")
	cmd.Stdin = strings.NewReader("through stdin\n")
	if got := runClean(t, cmd); got != "through stdin\n" {
		t.Fatalf("podman run -i cat printed %q", got)
	}
}

func TestProvisionPodmanRootless(t *testing.T) {
	ktest.RequireRoot(t)
	ktest.RequireCmd(t, "podman")
	u := ktest.RootlessUser
	out := runClean(t, ktest.RootlessPodman(u, "info", "--format", "{{.Host.Security.Rootless}} {{.Host.OCIRuntime.Name}}"))
	if strings.TrimSpace(out) != "true runc" {
		t.Fatalf("podman info as %s says %q, want \"true runc\" (run kernel-tests/provision.sh)", u, out)
	}
	img := ktest.PodmanRootlessImage(t, u)
	if got := runClean(t, ktest.RootlessPodman(u, "run", "--rm", "--network", "none", img, "/bin/sh", "-c", inBox)); got != inBoxWant {
		t.Fatalf("rootless podman run %s printed %q, want %q", img, got, inBoxWant)
	}
	cmd := ktest.RootlessPodman(u, "run", "--rm", "-i", "--network", "none", img, "/bin/cat")
	cmd.Stdin = strings.NewReader("through stdin\n")
	if got := runClean(t, cmd); got != "through stdin\n" {
		t.Fatalf("rootless podman run -i cat printed %q", got)
	}
}

func TestProvisionBusyboxRootfs(t *testing.T) {
	ktest.RequireRoot(t)
	dir := ktest.BusyboxRootfs(t)
	for _, p := range []string{"bin/busybox", "bin/sh", "bin/setsid", "bin/sleep", "etc/passwd", "etc/group"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("busybox rootfs %s: %v", dir, err)
		}
	}
	for _, p := range []string{"tmp", "work"} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
			t.Fatalf("busybox rootfs /%s: %v %v, want a 1777 directory", p, fi.Mode(), err)
		}
	}
	got := runClean(t, exec.Command("chroot", "--userspec=1000:1000", dir, "/bin/sh", "-c", "id -un; id -u"))
	if got != "agent\n1000\n" {
		t.Fatalf("chroot into %s printed %q, want agent and 1000", dir, got)
	}
	if again := ktest.BusyboxRootfs(t); again != dir {
		t.Fatalf("BusyboxRootfs changed from %s to %s", dir, again)
	}
}

// TestImageRecipes builds the image/ recipes offline, as image/README.md
// describes them: the FROM scratch watcher image from image/watcher.Dockerfile
// and a template from image/template.Dockerfile on top of the test image.
// The template's watcher, given no controller (stdin at EOF), must fail
// closed: exit 245 without starting anything.
func TestImageRecipes(t *testing.T) {
	ktest.RequireRoot(t)
	bins := ktest.Build(t)
	root := ktest.RepoRoot()
	for _, engine := range []string{"docker", "podman"} {
		t.Run(engine, func(t *testing.T) {
			ktest.RequireCmd(t, engine)
			base := ktest.DockerImage(t, engine)
			watcherImg, templateImg := "deathwatch-test/watcher:recipe", "deathwatch-test/template:recipe"
			if engine == "podman" {
				watcherImg, templateImg = "localhost/"+watcherImg, "localhost/"+templateImg
			}
			// The build context is the folder of the binaries under test.
			// (Builds may warn on stderr: docker 28's client without buildx
			// falls back to the legacy builder, which says so.)
			build(t, exec.Command(engine, "build", "-q", "-f", filepath.Join(root, "image", "watcher.Dockerfile"), "-t", watcherImg, bins.Dir))
			build(t, exec.Command(engine, "build", "-q", "-f", filepath.Join(root, "image", "template.Dockerfile"),
				"--build-arg", "BASE="+base, "--build-arg", "WATCHER_IMAGE="+watcherImg, "-t", templateImg, filepath.Join(root, "image")))
			t.Cleanup(func() { _ = exec.Command(engine, "rmi", "--force", templateImg, watcherImg).Run() })
			got := strings.TrimSpace(runClean(t, exec.Command(engine, "image", "inspect", "--format", "{{json .Config.Entrypoint}}", templateImg)))
			if got != `["/usr/local/bin/watcher","--control=stdin"]` {
				t.Fatalf("template entrypoint is %s", got)
			}
			cmd := exec.Command(engine, "run", "--rm", "-i", "--network", "none", templateImg)
			cmd.Stdin = strings.NewReader("")
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != shared.ExitLivenessLost {
				t.Fatalf("template run with no controller: %v, want exit %d (liveness lost)", err, shared.ExitLivenessLost)
			}
		})
	}
}

func build(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s: %v", strings.Join(cmd.Args, " "), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

// TestProvisionAgain runs provision.sh on the machine it already
// provisioned (make test ran it first): a later run must succeed and
// change nothing — no package installed, no file rewritten, no user
// created, no daemon started.
func TestProvisionDockerRootless(t *testing.T) {
	ktest.RequireRoot(t)
	ktest.RequireCmd(t, "docker")
	u := ktest.DockerRootlessUser
	out := runClean(t, ktest.AsUser(u, "docker", "info", "--format", "{{json .SecurityOptions}} {{.Driver}}"))
	if !strings.Contains(out, `"name=rootless"`) {
		t.Fatalf("docker info as %s says %q: not a rootless daemon (run kernel-tests/provision.sh)", u, out)
	}
	t.Logf("rootless dockerd of %s: %s", u, strings.TrimSpace(out))
	// Its id range is its own: clear of the rootless Podman user's and of
	// podman's --userns=auto pool.
	ranges := subIDRanges(t)
	mine, ok := ranges[u]
	if !ok {
		t.Fatalf("%s has no /etc/subuid range (run kernel-tests/provision.sh)", u)
	}
	for who, r := range ranges {
		if who != u && r[0] < mine[0]+mine[1] && mine[0] < r[0]+r[1] {
			t.Errorf("the sub-uid range of %s %v overlaps %s's %v", u, mine, who, r)
		}
	}
	img := ktest.DockerRootlessImage(t)
	if got := runClean(t, ktest.AsUser(u, "docker", "run", "--rm", "--network", "none", img, "/bin/sh", "-c", inBox)); got != inBoxWant {
		t.Fatalf("rootless docker run %s printed %q, want %q", img, got, inBoxWant)
	}
	cmd := ktest.AsUser(u, "docker", "run", "--rm", "-i", "--network", "none", img, "/bin/cat")
	cmd.Stdin = strings.NewReader("through stdin\n")
	if got := runClean(t, cmd); got != "through stdin\n" {
		t.Fatalf("rootless docker run -i cat printed %q", got)
	}
}

// subIDRanges reads /etc/subuid: user → [start, count].
func subIDRanges(t *testing.T) map[string][2]int {
	b, err := os.ReadFile("/etc/subuid")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][2]int{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) != 3 {
			continue
		}
		start, err1 := strconv.Atoi(f[1])
		n, err2 := strconv.Atoi(f[2])
		if err1 == nil && err2 == nil {
			m[f[0]] = [2]int{start, n}
		}
	}
	return m
}

func TestProvisionAgain(t *testing.T) {
	ktest.RequireRoot(t)
	cmd := exec.Command("bash", filepath.Join(ktest.RepoRoot(), "kernel-tests", "provision.sh"))
	cmd.Stdin = nil
	out, err := cmd.CombinedOutput()
	t.Logf("provision.sh, second run:\n%s", out)
	if err != nil {
		t.Fatalf("provision.sh on a provisioned machine: %v", err)
	}
	// Every step reports "ok (...)" when it found its piece in place
	// (provision.sh's steps, and the VM images' steps of vm.sh build as
	// "vm: STEP: ok"); the sub-id step prints the ranges, prefixed by
	// "added;" only when it wrote them.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		line = strings.TrimPrefix(line, "vm: ")
		step, status, _ := strings.Cut(strings.TrimPrefix(line, "provision: "), ":")
		status = strings.TrimSpace(status)
		switch {
		case step == "ready", step == "subordinate ids" && !strings.HasPrefix(status, "added"):
		case !strings.HasPrefix(status, "ok"):
			t.Errorf("a second run still changed something: %q", line)
		}
	}
}
