package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"deathwatch/supervisor/trusted"
)

// DefaultRetention is how long a closed entry is kept: a day, long
// enough to ask the next morning what became of a launch, short enough
// that a CI host running boxes all day keeps one day of them and no
// more. `supervisor reconcile --prune AGE` prunes with another age.
const DefaultRetention = 24 * time.Hour

// pruneEvery is how often a closing write also prunes: a closing write
// stats one marker file, and prunes only when the marker is older than
// this, so the walk of the closed entries runs about once an hour
// however many launches close.
const pruneEvery = time.Hour

// closedDir holds the closed entries, apart from the open ones: ls and
// reconcile read the instance's folder, where only open entries are,
// and never the closed ones unless asked.
const closedDir = "closed"

// pruneMarker is the file in closedDir whose modification time says
// when the closed entries were last pruned.
const pruneMarker = ".pruned"

func (j *Journal) closedPath(launchID string) string {
	return filepath.Join(j.dir, closedDir, launchID+".json")
}

// closeEntry writes the closing entry b into closedDir and then removes
// the open one. Neither step is synced (see Put). A kill between the
// two leaves both: ListOpen skips an open entry that has a closed one,
// and removes it.
func (j *Journal) closeEntry(e *Entry, b []byte) error {
	if err := trusted.EnsureDir(filepath.Join(j.dir, closedDir)); err != nil {
		return err
	}
	if err := writeFileAtomic(j.closedPath(e.LaunchID), b, false, false); err != nil {
		return err
	}
	if err := os.Remove(j.path(e.LaunchID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	j.pruneIfDue(time.Now())
	return nil
}

// pruneIfDue prunes the closed entries older than the journal's
// retention when the last prune is more than pruneEvery ago. It is
// housekeeping: a failure leaves the entries for the next prune.
func (j *Journal) pruneIfDue(now time.Time) {
	marker := filepath.Join(j.dir, closedDir, pruneMarker)
	fi, err := os.Lstat(marker)
	if err == nil && (!fi.Mode().IsRegular() || now.Sub(fi.ModTime()) < pruneEvery) {
		return
	}
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	f.Close()
	if os.Chtimes(marker, now, now) != nil {
		return
	}
	j.Prune(j.retention, now)
}

// Prune removes the closed entries last written more than age before
// now, and the temp files that killed closing writes left there. It
// returns how many entries it removed.
func (j *Journal) Prune(age time.Duration, now time.Time) (int, error) {
	dir := filepath.Join(j.dir, closedDir)
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("prune journal: %w", err)
	}
	if err := trusted.CheckDir(dir); err != nil {
		return 0, fmt.Errorf("prune journal: %w", err)
	}
	n := 0
	for _, de := range des {
		name := de.Name()
		entry := strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, ".")
		if !entry && !strings.Contains(name, ".json.tmp-") {
			continue
		}
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() || now.Sub(fi.ModTime()) <= age {
			continue
		}
		if os.Remove(filepath.Join(dir, name)) == nil && entry {
			n++
		}
	}
	return n, nil
}

// SetRetention sets the age past which the closing writes prune closed
// entries (DefaultRetention unless set).
func (j *Journal) SetRetention(age time.Duration) { j.retention = age }
