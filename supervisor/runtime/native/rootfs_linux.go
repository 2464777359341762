package native

import (
	"context"
	"deathwatch/supervisor"
	"deathwatch/supervisor/exitcode"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// CheckImage checks a --image rootfs tree before anything is created
// (none: the host's root).
func (n *Native) CheckImage(_ context.Context, image string) error {
	_, err := nativeRoot(image)
	return err
}

// nativeRoot is the host folder that becomes the box's root: the host's
// own root, or a --rootfs tree that must look like an unpacked image.
func nativeRoot(image string) (string, error) {
	if image == "" {
		return "/", nil
	}
	dir, err := filepath.Abs(image)
	if err != nil {
		return "", exitcode.Usage("bad rootfs %s: %w", image, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return "", exitcode.Image("bad rootfs %s: %w", image, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return "", exitcode.Image("bad rootfs %s: not a folder (pass an unpacked image tree)", image)
	}
	for _, d := range []string{"proc", "dev", "tmp"} {
		// Lstat: a symlink would point the box's own mounts elsewhere.
		if st, err := os.Lstat(filepath.Join(dir, d)); err != nil || !st.IsDir() {
			return "", exitcode.Image("bad rootfs %s: no /%s folder (an unpacked image has /proc, /dev and /tmp to mount on, as folders)", image, d)
		}
	}
	return dir, nil
}

// checkWorkdir refuses a workdir the agent could not enter: one that
// is neither /tmp, a mount (or below one), nor present in the root
// (below /tmp is a fresh, empty tmpfs; the minimal root shows only
// what minimalRootDirs and minimalEtc name), or one a folder on the way
// closes to others (the agent owns nothing of the root).
func checkWorkdir(b *supervisor.Box, root string) error {
	w := b.Workdir
	if w == "" || w == "/" || w == "/tmp" {
		return nil
	}
	for _, m := range b.Mounts {
		if w == m.Target || strings.HasPrefix(w, m.Target+"/") {
			return nil
		}
	}
	if under(w, "/tmp") {
		return exitcode.Usage("workdir %s is below the box's fresh /tmp, where nothing exists yet; mount it (--mount SRC:%s) or use /tmp", w, w)
	}
	if root == "/" {
		if _, ok := inMinimalRoot(w); !ok {
			return exitcode.Usage("workdir %s is not in the box's minimal root (it shows the host's /usr, /bin, /sbin, /lib* and a filtered /etc, nothing of /home, /root, /run, /srv, ...); mount it (--mount SRC:%s) or use /tmp", w, w)
		}
	}
	if st, err := os.Stat(filepath.Join(root, w)); err != nil || !st.IsDir() {
		return exitcode.Usage("workdir %s does not exist in the box's read-only root; mount it (--mount SRC:%s) or pick a folder that exists", w, w)
	}
	p := root
	for _, c := range strings.Split(strings.TrimPrefix(w, "/"), "/") {
		p = filepath.Join(p, c)
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o001 == 0 {
			return exitcode.Usage("workdir %s: %s (mode %#o) is closed to others, and in the box the agent owns nothing of the root; mount a folder there (--mount SRC:%s) or pick another", w, strings.TrimPrefix(p, strings.TrimSuffix(root, "/")), st.Mode().Perm(), w)
		}
	}
	return nil
}

// symlinkOnWay walks rel below base and returns the first symlink met
// (its path below base and its text), or "" when there is none before
// the walk ends or leaves what exists.
func symlinkOnWay(base, rel string) (string, string) {
	p := base
	for _, c := range strings.Split(strings.Trim(rel, "/"), "/") {
		if c == "" {
			continue
		}
		p = filepath.Join(p, c)
		st, err := os.Lstat(p)
		if err != nil {
			return "", ""
		}
		if st.Mode()&os.ModeSymlink != 0 {
			dest, _ := os.Readlink(p)
			return "/" + strings.TrimPrefix(strings.TrimPrefix(p, base), "/"), dest
		}
	}
	return "", ""
}

// checkMountTargets refuses a mount whose target the init stage could
// not create, or that passes through a symlink, looking where the box
// will see it: in the mount that covers it (its source on the host), in
// the rootfs, or in what the minimal root shows of the host. Below the
// box's own /tmp nothing exists yet, and the minimal root's own folders
// are made as needed.
func checkMountTargets(b *supervisor.Box, root string) error {
	for i, m := range b.Mounts {
		// The deepest other mount that covers the target.
		cover := -1
		for j, o := range b.Mounts {
			if j != i && o.Target != m.Target && under(m.Target, o.Target) && (cover < 0 || len(o.Target) > len(b.Mounts[cover].Target)) {
				cover = j
			}
		}
		var base, rel, where string
		switch {
		case cover >= 0:
			o := b.Mounts[cover]
			base, rel, where = o.Source, strings.TrimPrefix(m.Target, o.Target), "the mount at "+o.Target
		case under(m.Target, "/tmp"):
			continue
		case root == "/":
			tree, ok := inMinimalRoot(m.Target)
			if !ok {
				continue // made on the minimal root's own tmpfs
			}
			base, rel, where = "/", m.Target, "the host's "+tree
		default:
			base, rel, where = root, m.Target, "the rootfs"
		}
		if link, dest := symlinkOnWay(base, rel); link != "" {
			shown := link
			if cover >= 0 {
				shown = path.Join(b.Mounts[cover].Target, link)
			}
			return exitcode.Usage("mount target %s passes through the symlink %s -> %s (in %s); name the real path", m.Target, shown, dest, where)
		}
		if cover >= 0 {
			continue // created in the covering mount when missing
		}
		if _, err := os.Stat(filepath.Join(base, rel)); err != nil {
			return exitcode.Usage("mount target %s does not exist in the box's read-only root; pick a target that exists there, one below /tmp, or (on the host root) one outside /usr, /bin, /sbin, /lib* and /etc", m.Target)
		}
	}
	return nil
}

// under reports whether p is dir or below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func checkExecutable(p string) error {
	if p == "" || !filepath.IsAbs(p) {
		return fmt.Errorf("not an absolute path")
	}
	st, err := os.Stat(p)
	if err != nil {
		return errors.Unwrap(err)
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}
