package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"deathwatch/supervisor"
)

// libpodDB writes a state database laid out as libpod's (the buckets
// podmanDBHas reads), holding the containers ids (id → name).
func libpodDB(t *testing.T, path string, ids map[string]string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range append(append([]string{}, podmanCtrBuckets...), podmanNameBucket, "runtime-config") {
			if err := tx.DeleteBucket([]byte(b)); err != nil && err != bolt.ErrBucketNotFound {
				return err
			}
			if _, err := tx.CreateBucket([]byte(b)); err != nil {
				return err
			}
		}
		for id, name := range ids {
			c, err := tx.Bucket([]byte("ctr")).CreateBucket([]byte(id))
			if err != nil {
				return err
			}
			c.Put([]byte("config"), []byte(`{"name":"`+name+`"}`))
			tx.Bucket([]byte("all-ctrs")).Put([]byte(id), []byte(name))
			tx.Bucket([]byte("id-registry")).Put([]byte(id), []byte(name))
			tx.Bucket([]byte("name-registry")).Put([]byte(name), []byte(id))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

const (
	testID    = "4f48abb1e3dee94ba0a857b5cd37d581eaa9df7af0ac656b5028a980be92d219"
	otherID   = "0000abb1e3dee94ba0a857b5cd37d581eaa9df7af0ac656b5028a980be92d219"
	testBox   = "dw-20261201-023003-0c3ec169"
	otherName = "dw-other"
)

// stateDB is a folder only this user can write, and the path of a
// state database in it.
func stateDB(t *testing.T) (dir, db string) {
	dir = t.TempDir()
	os.Chmod(dir, 0o700)
	return dir, filepath.Join(dir, "bolt_state.db")
}

func TestPodmanDBHas(t *testing.T) {
	dir, db := stateDB(t)
	libpodDB(t, db, map[string]string{testID: testBox, otherID: otherName})
	has, f1, err := podmanDBHas(db, testID, testBox)
	if err != nil || !has {
		t.Fatalf("a database that holds the box: has %v, err %v", has, err)
	}
	// Removed: gone from every bucket; another box stays.
	libpodDB(t, db, map[string]string{otherID: otherName})
	has, f2, err := podmanDBHas(db, testID, testBox)
	if err != nil || has || f2 != f1 {
		t.Fatalf("after the removal: has %v, err %v, same file %v", has, err, f2 == f1)
	}
	// Any one trace of the box is enough to keep it: the name alone.
	libpodDB(t, db, map[string]string{otherID: testBox})
	if has, _, err := podmanDBHas(db, testID, testBox); err != nil || !has {
		t.Errorf("a database that still names the box: has %v, err %v", has, err)
	}
	// Not libpod's: no answer.
	other := filepath.Join(dir, "other.db")
	bdb, err := bolt.Open(other, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	if _, _, err := podmanDBHas(other, testID, testBox); err == nil || !strings.Contains(err.Error(), "not a libpod state database") {
		t.Errorf("an empty bolt file: err %v", err)
	}
	// Writable by others: not trusted.
	os.Chmod(db, 0o666)
	if _, _, err := podmanDBHas(db, testID, testBox); err == nil {
		t.Error("a database others can write was read")
	}
	if _, _, err := podmanDBHas(filepath.Join(dir, "none.db"), testID, testBox); err == nil {
		t.Error("a missing database gave an answer")
	}
}

// TestPodmanDBHasTakesNoLock: a read neither waits for podman's lock
// nor takes it (a stopped supervisor holding it would stop every podman
// on the host): with a writer holding the database exclusively, the
// read still answers.
func TestPodmanDBHasTakesNoLock(t *testing.T) {
	_, db := stateDB(t)
	libpodDB(t, db, map[string]string{testID: testBox})
	w, err := bolt.Open(db, 0o600, nil) // flock(LOCK_EX) until Close
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if has, _, err := podmanDBHas(db, testID, testBox); err != nil || !has {
		t.Errorf("with podman's lock held elsewhere: has %v, err %v", has, err)
	}
}

// TestRunGone: Remove's proof from the state database needs the same
// file to have held the box before and not to now.
func TestRunGone(t *testing.T) {
	dir, db := stateDB(t)
	ctx := context.Background()
	witnessed := func(e *Engine) *runWitness {
		libpodDB(t, db, map[string]string{testID: testBox})
		has, f, err := podmanDBHas(db, testID, testBox)
		if err != nil || !has {
			t.Fatalf("witness: %v %v", has, err)
		}
		w := &runWitness{ready: make(chan struct{}), id: testID, db: f}
		close(w.ready)
		e.runs = map[string]*runWitness{testBox: w}
		return w
	}
	b := &supervisor.Box{Name: testBox}

	e := &Engine{Kind: "podman"}
	witnessed(e)
	if e.runGone(ctx, b) {
		t.Error("gone while the database holds it")
	}
	if len(e.runs) != 0 {
		t.Errorf("the witness outlived Remove's look: %v", e.runs)
	}

	witnessed(e)
	libpodDB(t, db, nil)
	if !e.runGone(ctx, b) {
		t.Error("not gone though the database that held it no longer does")
	}

	// A database the box never was in: no proof.
	witnessed(e)
	e.runs[testBox].db.path = filepath.Join(dir, "elsewhere.db")
	libpodDB(t, e.runs[testBox].db.path, nil)
	if e.runGone(ctx, b) {
		t.Error("gone by a database that never held the box")
	}

	// Never witnessed: no proof, and no wait.
	e.runs = map[string]*runWitness{testBox: {ready: closed()}}
	if e.runGone(ctx, b) {
		t.Error("gone without a witness")
	}
	if (&Engine{Kind: "docker"}).runGone(ctx, b) {
		t.Error("gone for a box no one-step run started")
	}
}

// TestWitness: the run's box, its id read from the cidfile, is
// witnessed in the database that holds it, and the cidfile's folder is
// gone once it was read.
func TestWitness(t *testing.T) {
	_, db := stateDB(t)
	libpodDB(t, db, map[string]string{testID: testBox})
	e := &Engine{Kind: "podman"}
	for _, c := range []struct {
		name, box, cid, db string
		want               string
	}{
		{"held", testBox, testID + "\n", db, testID},
		{"not held", "dw-elsewhere", otherID, db, ""},
		{"no database", testBox, testID, "", ""},
		{"not an id", testBox, "Error: no", db, ""},
	} {
		b := &supervisor.Box{Name: c.box}
		run := filepath.Join(t.TempDir(), "dw-run-1")
		os.Mkdir(run, 0o700)
		os.WriteFile(filepath.Join(run, "cid"), []byte(c.cid), 0o600)
		w := &runWitness{ready: make(chan struct{})}
		e.witness(b, w, run, c.db)
		<-w.ready
		if w.id != c.want {
			t.Errorf("%s: witnessed %q, want %q", c.name, w.id, c.want)
		}
		if _, err := os.Stat(run); !os.IsNotExist(err) {
			t.Errorf("%s: the cidfile's folder is left (%v)", c.name, err)
		}
	}
}

func closed() chan struct{} { c := make(chan struct{}); close(c); return c }

func TestPodmanStateDB(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		euid int
		want string
	}{
		{map[string]string{"HOME": "/home/u"}, 0, "/var/lib/containers/storage/libpod/bolt_state.db"},
		{map[string]string{"HOME": "/home/u"}, 1000, "/home/u/.local/share/containers/storage/libpod/bolt_state.db"},
		{map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "/data"}, 1000, "/data/containers/storage/libpod/bolt_state.db"},
		{map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "rel"}, 1000, "/home/u/.local/share/containers/storage/libpod/bolt_state.db"},
		{map[string]string{}, 1000, ""},
	} {
		if got := podmanStateDB(c.env, c.euid); got != c.want {
			t.Errorf("%v euid %d: %q, want %q", c.env, c.euid, got, c.want)
		}
	}
}
