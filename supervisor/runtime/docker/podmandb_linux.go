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
// the file's identity is compared all the same. Reads share the lock
// podman's writers take (flock on the file), so no half-written
// transaction is read.

import (
	"errors"
	"fmt"
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
	var opened *os.File
	db, err := bolt.Open(path, 0, &bolt.Options{
		ReadOnly: true,
		Timeout:  5 * time.Second,
		OpenFile: func(p string, flag int, mode os.FileMode) (*os.File, error) {
			fl, err := os.OpenFile(p, flag, mode)
			if err == nil {
				err = sharedLock(fl, 5*time.Second)
				if err != nil {
					fl.Close()
					return nil, err
				}
				opened = fl
			}
			return fl, err
		},
	})
	if err != nil {
		return false, f, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	var ost unix.Stat_t
	if err := unix.Fstat(int(opened.Fd()), &ost); err != nil {
		return false, f, os.NewSyscallError("fstat", err)
	}
	if ost.Dev != st.Dev || ost.Ino != st.Ino {
		return false, f, fmt.Errorf("%s changed while it was opened", path)
	}
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

// sharedLock takes a shared flock on f, trying every millisecond (a
// podman writer holds its exclusive lock for about that long) until
// timeout. bbolt's own lock, taken next on the same open file, then
// holds at once (its retries sleep 50 ms).
func sharedLock(f *os.File, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return os.NewSyscallError("flock", err)
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s stayed locked for %v", f.Name(), timeout)
		}
		time.Sleep(time.Millisecond)
	}
}
