package docker

// Local Podman keeps its containers in one state database (libpod's
// BoltDB, podman 4; a podman 5 host with SQLite has no such file, and
// the listing serves). Reading it takes well under a millisecond where
// a `podman ps` takes a full podman process start (30-70 ms on a
// loaded 2-core host): Remove proves a one-step box gone from it.
//
// A read proves only what the same file said before: the box's id was
// in it while the box existed (witnessed after the create), and is
// gone from it now. A file podman does not use (another graph root, a
// stale database beside a new backend) never held the id, and then the
// listing proves, as before. A file replaced at the path (`podman
// system reset`) took every box with it, as the listing would say too;
// the file's identity is compared all the same. The file is read
// without podman's lock (stableCopy says why and how).

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"deathwatch/supervisor"
)

// libpod's buckets (libpod/boltdb_state_internal.go, podman 4 and 5):
// a container is in all four while it exists, and leaves them in one
// transaction when it is removed.
var (
	podmanCtrBuckets = []string{"ctr", "all-ctrs", "id-registry"} // keyed by id
	podmanNameBucket = "name-registry"                            // keyed by name
)

// podmanStateDB is the state database a local podman uses by default:
// GRAPHROOT/libpod/bolt_state.db, the graph root being root's
// /var/lib/containers/storage, or a user's
// $XDG_DATA_HOME/containers/storage (~/.local/share/...).
func podmanStateDB(env map[string]string, euid int) string {
	const rel = "containers/storage/libpod/bolt_state.db"
	if euid == 0 {
		return "/var/lib/" + rel
	}
	if d := env["XDG_DATA_HOME"]; filepath.IsAbs(d) {
		return filepath.Join(d, rel)
	}
	if h := env["HOME"]; filepath.IsAbs(h) {
		return filepath.Join(h, ".local/share", rel)
	}
	return ""
}

// dbFile is one state database file, as the first read found it.
type dbFile struct {
	path     string
	dev, ino uint64
}

// podmanDBHas reads whether the database at path holds the container
// id (in any of its id buckets) or the name; f says which file was
// read. The file must be this user's or root's, and nobody else's to
// write.
func podmanDBHas(path, id, name string) (has bool, f dbFile, err error) {
	if err := supervisor.CheckTrustedDir(filepath.Dir(path)); err != nil {
		return false, f, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false, f, os.NewSyscallError("lstat", err)
	}
	euid := uint32(os.Geteuid())
	if st.Mode&unix.S_IFMT != unix.S_IFREG || (st.Uid != euid && st.Uid != 0) || st.Mode&0o022 != 0 {
		return false, f, fmt.Errorf("%s: not a regular file of this user's or root's that only they can write", path)
	}
	data, ost, err := stableCopy(path)
	if err != nil {
		return false, f, err
	}
	if ost.Dev != st.Dev || ost.Ino != st.Ino {
		return false, f, fmt.Errorf("%s changed while it was opened", path)
	}
	// bbolt reads the copy, from a memory file of this process's own: its
	// lock is on the copy, never on podman's file.
	mfd, err := unix.MemfdCreate("dw-podman-state", unix.MFD_CLOEXEC)
	if err != nil {
		return false, f, os.NewSyscallError("memfd_create", err)
	}
	mem := os.NewFile(uintptr(mfd), "podman-state")
	defer mem.Close()
	if _, err := mem.Write(data); err != nil {
		return false, f, err
	}
	db, err := bolt.Open(fmt.Sprintf("/proc/self/fd/%d", mfd), 0, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return false, f, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	f = dbFile{path: path, dev: ost.Dev, ino: ost.Ino}
	err = db.View(func(tx *bolt.Tx) error {
		for _, b := range podmanCtrBuckets {
			bk := tx.Bucket([]byte(b))
			if bk == nil {
				return fmt.Errorf("%s has no %s bucket: not a libpod state database", path, b)
			}
			if bk.Get([]byte(id)) != nil || bk.Bucket([]byte(id)) != nil {
				has = true
			}
		}
		bk := tx.Bucket([]byte(podmanNameBucket))
		if bk == nil {
			return fmt.Errorf("%s has no %s bucket: not a libpod state database", path, podmanNameBucket)
		}
		if bk.Get([]byte(name)) != nil {
			has = true
		}
		return nil
	})
	return has, f, err
}

// stableCopy reads the file whole, twice, until two reads agree, and
// returns the bytes and the file's identity. It takes no lock: a lock
// of podman's file held by this process would stop every podman on the
// host for as long as this process is stopped (SIGSTOP, a frozen
// controller). bbolt never writes in place a page the last committed
// meta page reaches, and it writes a new meta page last; a commit
// between or during the reads changes the bytes, so two equal reads are
// one committed state.
func stableCopy(path string) ([]byte, unix.Stat_t, error) {
	var st unix.Stat_t
	fl, err := os.Open(path)
	if err != nil {
		return nil, st, err
	}
	defer fl.Close()
	if err := unix.Fstat(int(fl.Fd()), &st); err != nil {
		return nil, st, os.NewSyscallError("fstat", err)
	}
	read := func() ([]byte, error) {
		var fst unix.Stat_t
		if err := unix.Fstat(int(fl.Fd()), &fst); err != nil {
			return nil, os.NewSyscallError("fstat", err)
		}
		b := make([]byte, fst.Size)
		n, err := fl.ReadAt(b, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return b[:n], nil
	}
	prev, err := read()
	if err != nil {
		return nil, st, err
	}
	for range 20 {
		cur, err := read()
		if err != nil {
			return nil, st, err
		}
		if bytes.Equal(prev, cur) {
			return cur, st, nil
		}
		prev = cur
		time.Sleep(time.Millisecond)
	}
	return nil, st, fmt.Errorf("%s kept changing while it was read", path)
}
