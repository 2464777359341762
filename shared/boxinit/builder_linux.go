package boxinit

import (
	"os"
	"path"
	"strings"

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
type builder struct {
	root int
	dirs map[string]int // folder of the box (clean, absolute) → O_PATH descriptor
}

func (b *builder) close() {
	for p, fd := range b.dirs {
		unix.Close(fd)
		delete(b.dirs, p)
	}
}

// dir is the folder p of the box, opened once.
func (b *builder) dir(p string) (int, error) {
	if fd, ok := b.dirs[p]; ok {
		return fd, nil
	}
	fd, err := inRoot(b.root, p, unix.O_DIRECTORY)
	if err != nil {
		return -1, err
	}
	b.dirs[p] = fd
	return fd, nil
}

// covered forgets the folders at and beneath target, where a step
// mounts: their descriptors name what the mount covers.
func (b *builder) covered(target string) {
	for p, fd := range b.dirs {
		if target == "/" || p == target || strings.HasPrefix(p, target+"/") {
			unix.Close(fd)
			delete(b.dirs, p)
		}
	}
}

// apply applies one step (tree: the detached mount of a bind step). A
// step of the usual shape, a name made in a folder that is there,
// takes the short way here; anything else (a missing folder, a name
// that exists, a failure to report) goes through applyOp.
func (b *builder) apply(op shared.FsOp, tree int) error {
	target := path.Clean(op.Target)
	switch op.Op {
	case "mount", "bind", "rebind-ro":
		defer b.covered(target)
	}
	parent, base := path.Split(target)
	if base == "" || base == "." || base == ".." {
		return applyOp(b.root, op, tree)
	}
	parent = path.Clean(parent)
	switch op.Op {
	case "mkdir":
		// The umask is 0 while the box is built: the mode is exact.
		if dir, err := b.dir(parent); err == nil && unix.Mkdirat(dir, base, op.Mode) == nil {
			return nil
		}
	case "symlink":
		dir, err := b.dir(parent)
		if err != nil {
			return errorf("link %s: %w", op.Target, err)
		}
		if err := unix.Symlinkat(op.Source, dir, base); err != nil {
			return errorf("link %s to %s: %w", op.Target, op.Source, os.NewSyscallError("symlinkat", err))
		}
		return nil
	case "file":
		dir, err := b.dir(parent)
		if err != nil {
			return errorf("create %s: %w", op.Target, err)
		}
		fd, err := unix.Openat(dir, base, unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, op.Mode)
		if err != nil {
			return errorf("create %s: %w", op.Target, os.NewSyscallError("openat", err))
		}
		unix.Close(fd)
		return nil
	case "bind":
		dir, err := b.dir(parent)
		if err != nil {
			break
		}
		t := -1
		if op.Mkdir {
			t = b.fresh(dir, base, tree)
		} else if t, err = inRoot(dir, base, 0); err != nil {
			return mountTargetError(op.Target, err)
		}
		if t < 0 {
			break
		}
		defer unix.Close(t)
		if err := unix.MoveMount(tree, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return errorf("bind %s on %s: %w", op.Source, op.Target, os.NewSyscallError("move_mount", err))
		}
		unix.Close(tree)
		return nil
	}
	return applyOp(b.root, op, tree)
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
