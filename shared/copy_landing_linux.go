package shared

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// LandingSums hashes the files of copy-in trees while the engine still
// extracts the host's archive at CopyStageDir, before copy-in-landed:
// the verification (CopyReceiver.Landed) then skips a file hashed here
// and not changed since, so hashing overlaps the put.
//
// A file is hashed once the engine is done with it: the host writes the
// tar in its walk's order and the engine extracts it entry by entry, so
// a file with a later name beside it is complete; a root's last names
// wait for Finish. A hash is kept with what fstat says before and after
// the read (device, inode, size, modification and change times): any
// write, chmod or chown since changes the change time, and Landed reads
// such a file again (on a kernel with coarse timestamps, a same-size
// rewrite within one tick is not seen). A file with an aligned 4 KiB
// block of zeros is not kept: Landed punches those into holes.
type LandingSums struct {
	mu   sync.Mutex
	sums map[string]landedSum // by path below the stage folder ("0/a/b")
	done map[string]bool      // complete and seen: skipped by later passes
	buf  []byte
	// jobs, while Finish runs, takes each file to hash (opened) to its
	// workers instead of hashing it on the way.
	jobs chan landingJob
	// listing is the time this pass spent listing folders.
	listing time.Duration

	Files, Bytes int64 // hashed ahead
	Used         int64 // digests given to the verification
}

type landedSum struct {
	id  fileID
	sum []byte
}

type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func idOf(st *unix.Stat_t) fileID {
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// MaxLandingSums bounds what LandingSums keeps (a path and a digest
// each): past it, files are left to the verification.
const MaxLandingSums = 1 << 15

// Sum is the digest of the file at p (below the stage folder) when it
// was hashed ahead and st, a fresh fstat of it, says it is the same
// file unchanged; nil otherwise.
func (l *LandingSums) Sum(p string, st *unix.Stat_t) []byte {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.sums[p]; ok && s.id == idOf(st) {
		l.Used++
		return s.sum
	}
	return nil
}

// Run hashes ahead what lands at stage (below root, nothing followed)
// for the roots 0..roots-1, pass after pass, until stop is closed; it
// returns once it has stopped.
func (l *LandingSums) Run(stop <-chan struct{}, root int, stage string, roots int) {
	l.init()
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	wait := 10 * time.Millisecond
	for {
		l.listing = 0
		progress := false
		if fd, err := unix.Openat2(root, stage, how); err == nil {
			for i := 0; i < roots && !stopped(stop); i++ {
				name := itoa(i)
				rfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					continue
				}
				// A root is never known complete by its neighbours: the
				// stage folder's names sort as strings, the roots land in
				// numeric order.
				if l.dir(stop, rfd, name, false) {
					progress = true
				}
				unix.Close(rfd)
			}
			unix.Close(fd)
		}
		if l.full() {
			return
		}
		// Passes list the folders being filled again: between them, a
		// pause of at least four times a pass's listing, longer while
		// nothing new lands (the engine's creations wait for a listing).
		if progress {
			wait = max(10*time.Millisecond, 4*l.listing)
		} else if wait < 100*time.Millisecond {
			wait *= 2
		}
		// (time.AfterFunc, not time.After: a chan time.Time keeps
		// time's formatting in the watcher's binary; watcher/alarm.go.)
		due := make(chan struct{})
		t := time.AfterFunc(wait, func() { close(due) })
		select {
		case <-stop:
			t.Stop()
			return
		case <-due:
		}
	}
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func (l *LandingSums) full() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.done) >= MaxLandingSums
}

// dir hashes the complete files below folder fd (path p); complete says
// the folder's own tree is (a later name beside it exists). It reports
// whether it hashed or finished anything.
func (l *LandingSums) dir(stop <-chan struct{}, fd int, p string, complete bool) bool {
	t0 := time.Now()
	names, err := readNames(fd)
	l.listing += time.Since(t0)
	if err != nil {
		return false
	}
	progress, all := false, complete
	for i, n := range names {
		if stopped(stop) || l.full() {
			return progress
		}
		cp := p + "/" + n
		l.mu.Lock()
		seen := l.done[cp]
		l.mu.Unlock()
		if seen {
			continue
		}
		whole := complete || i < len(names)-1
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			all = false
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			cfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				all = false
				continue
			}
			if l.dir(stop, cfd, cp, whole) {
				progress = true
			}
			unix.Close(cfd)
		case unix.S_IFREG:
			if whole {
				l.file(stop, fd, n, cp)
				progress = true
			}
		default:
			if whole {
				l.finish(cp)
			}
		}
		l.mu.Lock()
		seen = l.done[cp]
		l.mu.Unlock()
		if !seen {
			all = false
		}
	}
	if all {
		l.finish(p)
		progress = true
	}
	return progress
}

func (l *LandingSums) finish(p string) {
	l.mu.Lock()
	l.done[p] = true
	l.mu.Unlock()
}

func (l *LandingSums) init() {
	l.mu.Lock()
	if l.sums == nil {
		l.sums, l.done = map[string]landedSum{}, map[string]bool{}
	}
	l.mu.Unlock()
}

// Finish hashes, before the verification walks it, every file of the
// landed root name (in folder dirfd) that Run left: the put is over,
// so every file is complete, the root's last names too. The files are
// hashed by as many workers as the watcher has CPUs (the engine's
// extraction is done: the cores are the verification's), each read
// once; the walk that follows finds their digests (Sum) as it finds
// Run's, by the same fstat, and reads again only what changed since.
// Run must have returned.
func (l *LandingSums) Finish(dirfd int, name string) {
	if l == nil {
		return
	}
	l.init()
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return // a root that is a file is the walk's to read
	}
	defer unix.Close(fd)
	workers := min(max(runtime.GOMAXPROCS(0), 1), 4)
	l.jobs = make(chan landingJob, 2*workers)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for j := range l.jobs {
				l.hash(nil, j.fd, j.p, &buf)
			}
		}()
	}
	l.dir(nil, fd, name, true)
	close(l.jobs)
	wg.Wait()
	l.jobs = nil
}

// landingJob is a file opened for Finish's workers (theirs to close).
type landingJob struct {
	fd int
	p  string
}

// file hashes a complete file (Finish: hands it to a worker).
func (l *LandingSums) file(stop <-chan struct{}, dirfd int, name, p string) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		l.finish(p)
		return
	}
	if l.jobs != nil {
		l.jobs <- landingJob{fd, p}
		return
	}
	l.hash(stop, fd, p, &l.buf)
}

// hash reads the open file fd (path p; closed here) and keeps its
// digest when nothing changed it while it was read. Stopped halfway,
// it leaves the file as not seen.
func (l *LandingSums) hash(stop <-chan struct{}, fd int, p string, buf *[]byte) {
	defer unix.Close(fd)
	var before, after unix.Stat_t
	if unix.Fstat(fd, &before) != nil || before.Mode&unix.S_IFMT != unix.S_IFREG {
		l.finish(p)
		return
	}
	if len(*buf) < CopyChunk {
		*buf = make([]byte, CopyChunk)
	}
	h := NewSHA256()
	for off := int64(0); off < before.Size; {
		if stopped(stop) {
			return
		}
		n, err := unix.Pread(fd, (*buf)[:min(int64(len(*buf)), before.Size-off)], off)
		if err != nil || n == 0 {
			l.finish(p)
			return
		}
		b := (*buf)[:n]
		for i := (HoleBlock - off%HoleBlock) % HoleBlock; i+HoleBlock <= int64(n); i += HoleBlock {
			if IsZeroBlock(b[i : i+HoleBlock]) {
				l.finish(p) // left to the verification, which punches it
				return
			}
		}
		h.Write(b)
		off += int64(n)
	}
	defer l.finish(p)
	if unix.Fstat(fd, &after) != nil || idOf(&after) != idOf(&before) {
		return
	}
	l.mu.Lock()
	l.sums[p] = landedSum{id: idOf(&after), sum: h.Sum(nil)}
	l.Files++
	l.Bytes += after.Size
	l.mu.Unlock()
}
