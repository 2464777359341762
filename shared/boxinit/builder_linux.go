package boxinit

import (
	"errors"
	"path"

	"golang.org/x/sys/unix"

	"deathwatch/shared"
)

// builder applies the steps beneath the new root and holds open the
// folders it makes names in: most steps make one name in a folder an
// earlier step opened (/etc/NAME, /dev/NAME), and a walk from the root
// for each would cost more lookups and descriptors than the step.
// Every folder is opened beneath the root without following a symlink
// (inRoot), as before; what a step creates fresh in one it uses by the
// descriptor the create returned, or opens again the same way.
//
// The folders are a short list, not a map: a handful at a time, and a
// map of strings would add its code to the watcher binary.
type builder struct {
	root int
	dirs []openDir
}

// openDir is a folder of the box (clean, absolute) and its O_PATH
// descriptor.
type openDir struct {
	path string
	fd   int
}

func (b *builder) close() { b.covered("/") }

// dir is the folder p of the box, opened once.
func (b *builder) dir(p string) (int, error) {
	for _, d := range b.dirs {
		if d.path == p {
			return d.fd, nil
		}
	}
	fd, err := inRoot(b.root, p, unix.O_DIRECTORY)
	if err != nil {
		return -1, err
	}
	b.dirs = append(b.dirs, openDir{p, fd})
	return fd, nil
}

// covered forgets the folders at and beneath target, where a step
// mounts: their descriptors name what the mount covers.
func (b *builder) covered(target string) {
	kept := b.dirs[:0]
	for _, d := range b.dirs {
		if under(d.path, target) {
			unix.Close(d.fd)
			continue
		}
		kept = append(kept, d)
	}
	b.dirs = kept
}

// apply applies one step below the new root (tree: the detached mount
// of a bind step).
func (b *builder) apply(op shared.FsOp, tree int) error {
	target := path.Clean(op.Target)
	switch op.Op {
	case "mount", "bind", "rebind-ro":
		defer b.covered(target)
	}
	switch op.Op {
	case "mount":
		t, err := inRoot(b.root, op.Target, unix.O_DIRECTORY)
		if op.Optional && errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return step2("mount %s on %s: %w", op.Source, op.Target, "", err)
		}
		defer unix.Close(t)
		if err := unix.Mount(op.Source, fdPath(t), op.Source, op.Flags, op.Data); err != nil {
			return step2("mount %s on %s: %w", op.Source, op.Target, "mount", err)
		}
	case "mkdir":
		dir, base, err := b.parent(target)
		if err != nil {
			return step1("create %s: %w", op.Target, "", err)
		}
		// The umask is 0 while the box is built: a new folder has the
		// step's mode; one that was there gets it.
		if err := unix.Mkdirat(dir, base, op.Mode); err == nil {
			return nil
		} else if err != unix.EEXIST {
			return step1("create %s: %w", op.Target, "mkdirat", err)
		}
		t, err := inRoot(dir, base, unix.O_DIRECTORY)
		if err != nil {
			return step1("create %s: %w", op.Target, "", err)
		}
		defer unix.Close(t)
		if err := unix.Chmod(fdPath(t), op.Mode); err != nil {
			return step1("chmod %s: %w", op.Target, "chmod", err)
		}
	case "file":
		dir, base, err := b.parent(target)
		if err != nil {
			return step1("create %s: %w", op.Target, "", err)
		}
		fd, err := unix.Openat(dir, base, unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, op.Mode)
		if err != nil {
			return step1("create %s: %w", op.Target, "openat", err)
		}
		unix.Close(fd)
	case "symlink":
		dir, base, err := b.parent(target)
		if err != nil {
			return step1("link %s: %w", op.Target, "", err)
		}
		if err := unix.Symlinkat(op.Source, dir, base); err != nil {
			return step2("link %s to %s: %w", op.Target, op.Source, "symlinkat", err)
		}
	case "bind":
		// Most often the name is new in a folder that is there; else
		// (its folder missing, or the name there) bindTarget finds or
		// makes the way.
		t := -1
		dir, base, err := b.parent(target)
		switch {
		case err == nil && op.Mkdir:
			t = b.fresh(dir, base, tree)
		case err == nil:
			if t, err = inRoot(dir, base, 0); err != nil {
				return mountTargetError(op.Target, err)
			}
		}
		if t < 0 {
			if t, err = bindTarget(b.root, op, tree); err != nil {
				return err
			}
		}
		defer unix.Close(t)
		if err := unix.MoveMount(tree, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return step2("bind %s on %s: %w", op.Source, op.Target, "move_mount", err)
		}
		unix.Close(tree)
	case "rebind-ro":
		t, err := inRoot(b.root, op.Target, 0)
		if errors.Is(err, unix.ENOENT) {
			return nil // this kernel has no such file
		}
		if err != nil {
			return step1("make %s read-only: %w", op.Target, "", err)
		}
		defer unix.Close(t)
		fd, err := cloneAt(t, unix.MOUNT_ATTR_RDONLY)
		if err != nil {
			return step1("make %s read-only: %w", op.Target, "", err)
		}
		defer unix.Close(fd)
		if err := unix.MoveMount(fd, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return step1("make %s read-only: %w", op.Target, "move_mount", err)
		}
	case "readonly":
		t, err := inRoot(b.root, op.Target, unix.O_DIRECTORY)
		if err != nil {
			return step1("make %s read-only: %w", op.Target, "", err)
		}
		defer unix.Close(t)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			return step1("make %s read-only: %w", op.Target, "mount_setattr", err)
		}
	default:
		return errorf("unknown setup step %q", op.Op)
	}
	return nil
}

// under reports whether p is dir or beneath it (both clean, absolute).
func under(p, dir string) bool {
	return dir == "/" || p == dir || len(p) > len(dir) && p[len(dir)] == '/' && p[:len(dir)] == dir
}

// parent opens the folder that holds target (clean, absolute), once,
// and names target's last part.
func (b *builder) parent(target string) (int, string, error) {
	dir, base := path.Split(target)
	if base == "" || base == "." || base == ".." {
		return -1, "", errorf("%s: no file name", target)
	}
	fd, err := b.dir(path.Clean(dir))
	return fd, base, err
}

// fresh makes name in the folder dir for the mount tree with the type
// of its source (a folder, or an empty file) and opens it; -1 when it
// cannot be made new there (it exists, the folder is read-only), which
// bindTarget then sorts out. The create refuses a name that exists, so
// what is opened is what it made.
func (b *builder) fresh(dir int, name string, tree int) int {
	var st unix.Stat_t
	if unix.Fstat(tree, &st) != nil {
		return -1
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		fd, err := unix.Openat(dir, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return -1
		}
		return fd
	}
	if unix.Mkdirat(dir, name, 0o755) != nil {
		return -1
	}
	fd, err := inRoot(dir, name, 0)
	if err != nil {
		return -1
	}
	return fd
}
