package ktest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"deathwatch/kernel-tests/ktest/ociimage"
)

// What kernel-tests/provision.sh sets up for rootless Podman and Docker.
const (
	// RootlessUser is the unprivileged user that runs rootless Podman.
	RootlessUser = "dwtest"
	// RootlessUID is its uid (and gid).
	RootlessUID = 2345
	// DockerRootlessUser is the unprivileged user whose own rootless
	// Docker daemon answers at DockerRootlessSocket.
	DockerRootlessUser = "dwdocker"
	// ImageRepo is the repository of the test images; the tag is a
	// content hash of what the image holds (see DockerImage).
	ImageRepo = "deathwatch-test"
	// ImageWatcher is where the test image holds the static watcher.
	ImageWatcher = "/usr/local/bin/watcher"
)

// Users of the busybox tree and test image (/etc/passwd and /etc/group).
const (
	AgentUID   = 1000
	WatcherUID = 65533
)

// layoutVersion changes whenever the tree below changes in a way the
// content hash would not see (users, directories, image config).
const layoutVersion = "deathwatch-busybox-v1"

// entry is one file of the busybox tree, as plain data: the same list is
// written to a directory (BusyboxRootfs) and to an image tarball.
type entry struct {
	name string // relative, no leading slash
	mode fs.FileMode
	kind byte // tar.TypeDir, tar.TypeReg, tar.TypeSymlink
	link string
	data []byte
	uid  int
	gid  int
}

// busyboxEntries is the tree: /bin/busybox with a symlink for every
// applet, /etc/passwd and /etc/group, and the usual empty directories.
func busyboxEntries(busybox []byte, applets []string) []entry {
	dir := func(name string, mode fs.FileMode) entry {
		return entry{name: name, mode: mode, kind: tar.TypeDir}
	}
	const sticky = fs.ModeSticky | 0o777
	file := func(name string, mode fs.FileMode, data []byte) entry {
		return entry{name: name, mode: mode, kind: tar.TypeReg, data: data}
	}
	es := []entry{
		dir("bin", 0o755), dir("etc", 0o755), dir("dev", 0o755), dir("proc", 0o555),
		dir("sys", 0o555), dir("root", 0o700), dir("tmp", sticky), dir("work", sticky),
		dir("usr", 0o755), dir("usr/local", 0o755), dir("usr/local/bin", 0o755), dir("var", 0o755),
		dir("var/tmp", sticky),
		{name: "usr/bin", kind: tar.TypeSymlink, link: "../bin", mode: 0o777},
		{name: "sbin", kind: tar.TypeSymlink, link: "bin", mode: 0o777},
		file("bin/busybox", 0o755, busybox),
		file("etc/passwd", 0o644, []byte(fmt.Sprintf(
			"root:x:0:0:root:/root:/bin/sh\n"+
				"agent:x:%d:%d:agent:/work:/bin/sh\n"+
				"%s:x:%d:%d::/tmp:/bin/sh\n"+
				"watcher:x:%d:%d:watcher:/:/bin/false\n"+
				"nobody:x:65534:65534:nobody:/:/bin/false\n",
			AgentUID, AgentUID, RootlessUser, RootlessUID, RootlessUID, WatcherUID, WatcherUID))),
		file("etc/group", 0o644, []byte(fmt.Sprintf(
			"root:x:0:\nagent:x:%d:\n%s:x:%d:\nwatcher:x:%d:\nnogroup:x:65534:\n",
			AgentUID, RootlessUser, RootlessUID, WatcherUID))),
	}
	for _, a := range applets {
		if a == "busybox" || strings.ContainsRune(a, '/') {
			continue
		}
		es = append(es, entry{name: "bin/" + a, kind: tar.TypeSymlink, link: "busybox", mode: 0o777})
	}
	return es
}

type busyboxInfo struct {
	data    []byte
	applets []string
	sum     string // hash of the tree's content
}

var (
	busyboxOnce sync.Once
	busybox     busyboxInfo
	busyboxErr  error
)

// loadBusybox reads the static busybox and its applet list once.
func loadBusybox() (busyboxInfo, error) {
	busyboxOnce.Do(func() {
		busybox, busyboxErr = readBusybox()
	})
	return busybox, busyboxErr
}

func readBusybox() (busyboxInfo, error) {
	path, err := exec.LookPath("busybox")
	if err != nil {
		return busyboxInfo{}, fmt.Errorf("busybox is not installed; run kernel-tests/provision.sh (it installs busybox-static)")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return busyboxInfo{}, fmt.Errorf("read busybox: %w", err)
	}
	if err := requireStatic(path); err != nil {
		return busyboxInfo{}, err
	}
	out, err := exec.Command(path, "--list").Output()
	if err != nil {
		return busyboxInfo{}, fmt.Errorf("list busybox applets (%s --list): %w", path, err)
	}
	applets := strings.Fields(string(out))
	sort.Strings(applets)
	for _, need := range []string{"sh", "sleep", "setsid", "cat", "env", "id", "ls", "ps", "kill", "true", "false", "echo", "grep", "wc"} {
		if !slices.Contains(applets, need) {
			return busyboxInfo{}, fmt.Errorf("%s has no %q applet; install Debian's busybox-static (kernel-tests/provision.sh)", path, need)
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", layoutVersion, strings.Join(applets, " "))
	h.Write(data)
	return busyboxInfo{data: data, applets: applets, sum: hex.EncodeToString(h.Sum(nil))}, nil
}

// requireStatic fails for a dynamically linked binary: it would not run in
// a FROM scratch image or a bare rootfs.
func requireStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("read %s as ELF: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; install Debian's busybox-static (kernel-tests/provision.sh) or build the binary with CGO_ENABLED=0", path)
		}
	}
	return nil
}

var (
	rootfsOnce sync.Once
	rootfsDir  string
	rootfsErr  error
)

// BusyboxRootfs returns a directory tree to use as a box's root: the
// static busybox at /bin/busybox with a symlink per applet (sh, sleep,
// setsid, cat, env, id, ls, ps, kill, ...), /etc/passwd and /etc/group
// with root, agent (1000), dwtest (2345), watcher (65533) and nobody, and
// empty /tmp, /proc, /dev, /sys, /work. It is built once per content and
// shared between test processes: treat it as read-only (mount a tmpfs or
// a copy over anything a test writes).
func BusyboxRootfs(t testing.TB) string {
	t.Helper()
	rootfsOnce.Do(func() { rootfsDir, rootfsErr = makeRootfs() })
	if rootfsErr != nil {
		t.Fatalf("busybox rootfs: %v", rootfsErr)
	}
	return rootfsDir
}

func makeRootfs() (string, error) {
	bb, err := loadBusybox()
	if err != nil {
		return "", err
	}
	final := filepath.Join(os.TempDir(), "deathwatch-rootfs-"+bb.sum[:16])
	if _, err := os.Stat(filepath.Join(final, "bin", "busybox")); err == nil {
		return final, nil
	}
	tmp, err := os.MkdirTemp(os.TempDir(), "deathwatch-rootfs-tmp-")
	if err != nil {
		return "", fmt.Errorf("make rootfs: %w", err)
	}
	if err := writeTree(tmp, busyboxEntries(bb.data, bb.applets)); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("make rootfs: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("make rootfs: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another test process made it first.
		os.RemoveAll(tmp)
		if _, serr := os.Stat(filepath.Join(final, "bin", "busybox")); serr == nil {
			return final, nil
		}
		return "", fmt.Errorf("make rootfs: %w", err)
	}
	return final, nil
}

func writeTree(root string, es []entry) error {
	for _, e := range es {
		p := filepath.Join(root, e.name)
		switch e.kind {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.WriteFile(p, e.data, 0o600); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(e.link, p); err != nil {
				return err
			}
			continue
		}
		// Chmod after creation: the umask must not narrow /tmp's 1777.
		if err := os.Chmod(p, e.mode); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(p, e.uid, e.gid); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeTar writes the entries as an uncompressed tarball owned by root.
func writeTar(w io.Writer, es []entry) error {
	tw := tar.NewWriter(w)
	// A fixed time keeps the tarball (and so the layer) reproducible.
	mtime := time.Unix(0, 0)
	for _, e := range es {
		h := &tar.Header{
			Name: e.name, Typeflag: e.kind, Linkname: e.link, Uid: e.uid, Gid: e.gid,
			Mode: int64(e.mode.Perm()), ModTime: mtime, Format: tar.FormatPAX,
		}
		if e.mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if e.kind == tar.TypeDir {
			h.Name += "/"
		}
		if e.kind == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if e.kind == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// imageTar is the test image's filesystem: the busybox tree plus the
// watcher at ImageWatcher. It returns the tarball and its content hash.
func imageTar(watcherPath string) ([]byte, string, error) {
	bb, err := loadBusybox()
	if err != nil {
		return nil, "", err
	}
	w, err := os.ReadFile(watcherPath)
	if err != nil {
		return nil, "", fmt.Errorf("read watcher: %w", err)
	}
	if err := requireStatic(watcherPath); err != nil {
		return nil, "", err
	}
	es := append(busyboxEntries(bb.data, bb.applets), entry{name: strings.TrimPrefix(ImageWatcher, "/"), mode: 0o755, kind: tar.TypeReg, data: w})
	var buf bytes.Buffer
	if err := writeTar(&buf, es); err != nil {
		return nil, "", fmt.Errorf("write image tarball: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", layoutVersion, strings.Join(imageChanges, "\n"))
	h.Write(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(h.Sum(nil)), nil
}

// imageChanges is the image configuration given to `import --change`: no
// entrypoint, so `docker run IMAGE true` runs true and a test says
// --entrypoint /usr/local/bin/watcher when it wants the watcher.
var imageChanges = []string{
	`ENV PATH=/usr/local/bin:/bin`,
	`WORKDIR /`,
	`CMD ["/bin/sh"]`,
}

// imageConfig is imageChanges for an OCI image (WatcherImage).
var imageConfig = ociimage.Config{Env: []string{"PATH=/usr/local/bin:/bin"}, WorkingDir: "/", Cmd: []string{"/bin/sh"}}

// importArgs is the argv (after the engine) that imports the tarball on
// stdin as name.
func importArgs(name string) []string {
	args := []string{"import"}
	for _, c := range imageChanges {
		args = append(args, "--change", c)
	}
	return append(args, "-", name)
}

var (
	imagesMu sync.Mutex
	images   = map[string]string{} // engine/user → image name
)

// DockerImage returns the name of the test image in a rootful engine
// ("docker" or "podman"), importing it when it is not there yet: the
// busybox tree of BusyboxRootfs plus the static watcher of Build at
// /usr/local/bin/watcher, no entrypoint, CMD /bin/sh. The tag is a hash
// of the content, so a rebuilt watcher gets a new image and an unchanged
// one costs one `image inspect`. It is also tagged deathwatch-test:busybox.
func DockerImage(t testing.TB, engine string) string {
	t.Helper()
	if engine != "docker" && engine != "podman" {
		t.Fatalf("DockerImage: engine %q is not docker or podman", engine)
	}
	RequireCmd(t, engine)
	return image(t, engine, "", func(args ...string) *exec.Cmd { return exec.Command(engine, args...) })
}

// PodmanRootlessImage is DockerImage for rootless Podman run by user
// (normally RootlessUser), whose image store is its own.
func PodmanRootlessImage(t testing.TB, user string) string {
	t.Helper()
	RequireCmd(t, "podman")
	RequireCmd(t, "runuser")
	if _, err := RuntimeDir(user); err != nil {
		t.Fatalf("rootless podman: %v", err)
	}
	return image(t, "podman", user, func(args ...string) *exec.Cmd { return RootlessPodman(user, args...) })
}

// DockerRootlessImage is DockerImage for the rootless Docker daemon of
// DockerRootlessUser, whose image store is its own.
func DockerRootlessImage(t testing.TB) string {
	t.Helper()
	RequireCmd(t, "docker")
	if _, err := DockerRootlessSocket(); err != nil {
		t.Fatalf("rootless docker: %v", err)
	}
	return image(t, "docker", DockerRootlessUser, func(args ...string) *exec.Cmd { return AsUser(DockerRootlessUser, "docker", args...) })
}

func image(t testing.TB, engine, user string, command func(args ...string) *exec.Cmd) string {
	t.Helper()
	w := Build(t).Watcher
	key := engine + "/" + user + "/" + w
	imagesMu.Lock()
	defer imagesMu.Unlock()
	if name, ok := images[key]; ok {
		return name
	}
	data, sum, err := imageTar(w)
	if err != nil {
		t.Fatalf("test image: %v", err)
	}
	repo := ImageRepo
	if engine == "podman" {
		repo = "localhost/" + ImageRepo
	}
	name := repo + ":busybox-" + sum[:16]
	who := engine
	if user != "" {
		who = "rootless " + engine + " as " + user
	}
	if err := command("image", "inspect", "--format", "{{.Id}}", name).Run(); err != nil {
		cmd := command(importArgs(name)...)
		cmd.Stdin = bytes.NewReader(data)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("import test image %s into %s: %v\n%s\n(is the engine running and configured? run kernel-tests/provision.sh)", name, who, err, out)
		}
		if out, err := command("image", "inspect", "--format", "{{.Id}}", name).CombinedOutput(); err != nil {
			t.Fatalf("test image %s missing from %s right after import: %v\n%s", name, who, err, out)
		}
	}
	// A convenience name for people; tests use the content-hash name.
	if out, err := command("tag", name, repo+":busybox").CombinedOutput(); err != nil {
		t.Fatalf("tag test image %s in %s: %v\n%s", name, who, err, out)
	}
	images[key] = name
	return name
}

// RuntimeDir is the XDG_RUNTIME_DIR that provision.sh made for user.
func RuntimeDir(name string) (string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return "", fmt.Errorf("look up user %s: %w (kernel-tests/provision.sh creates %s)", name, err, RootlessUser)
	}
	dir := "/run/user/" + u.Uid
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("runtime dir of %s: %w (kernel-tests/provision.sh creates it)", name, err)
	}
	return dir, nil
}

// DockerRootlessSocket is the socket of DockerRootlessUser's daemon.
func DockerRootlessSocket() (string, error) {
	dir, err := RuntimeDir(DockerRootlessUser)
	if err != nil {
		return "", err
	}
	sock := filepath.Join(dir, "docker.sock")
	if _, err := os.Stat(sock); err != nil {
		return "", fmt.Errorf("rootless docker socket of %s: %w (kernel-tests/provision.sh starts its daemon)", DockerRootlessUser, err)
	}
	return sock, nil
}

// UserEnv is what a login of user would have that the engines read:
// XDG_RUNTIME_DIR, and DOCKER_HOST for the rootless Docker user (as
// dockerd-rootless-setuptool.sh tells its users to set).
func UserEnv(user string) []string {
	var env []string
	if dir, err := RuntimeDir(user); err == nil {
		env = append(env, "XDG_RUNTIME_DIR="+dir)
		if user == DockerRootlessUser {
			env = append(env, "DOCKER_HOST=unix://"+filepath.Join(dir, "docker.sock"))
		}
	}
	return env
}

// AsUser returns a command that runs name args as user, the way the
// rootless engine tests need it: through runuser, with the user's
// UserEnv, from / (rootless Podman fails in a working directory the
// user cannot enter, such as /root), in the user's session when
// EnvUserSession says so.
func AsUser(user, name string, args ...string) *exec.Cmd {
	return runuser(user, sessionArgv(name, args))
}

// AsUserHere is AsUser where the test runs, never in the user's
// session: for a command the test puts in a cgroup of its own, or one
// that must run outside every subtree delegated to the user.
func AsUserHere(user, name string, args ...string) *exec.Cmd {
	return runuser(user, append([]string{name}, args...))
}

func runuser(user string, command []string) *exec.Cmd {
	argv := append([]string{"-u", user, "--", "env"}, UserEnv(user)...)
	cmd := exec.Command("runuser", append(argv, command...)...)
	cmd.Dir = "/"
	return cmd
}

// RootlessPodman returns `podman args...` run by user (rootless).
func RootlessPodman(user string, args ...string) *exec.Cmd {
	return AsUser(user, "podman", args...)
}
