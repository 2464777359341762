package idslot

import (
	"bufio"
	"deathwatch/supervisor/proc"
	"deathwatch/supervisor/trusted"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Ranges allocates host id slots for boxes: slot i is the ids
// base + i·size … + size-1, for i below slots.
type Ranges struct {
	dir string
	// taken reports host ids already in use on the host (accounts,
	// subordinate ranges): a slot that overlaps one is never used.
	taken             []idSpan
	base, size, slots int64
	// gidBase is where the gid slots start (unprivileged: the
	// subordinate gid range; as root the box's gids are its uids).
	gidBase int64
	// where says, in a refusal, which ids the slots come from.
	where string
	// EngineHas, when set, asks the engine of the allocating runtime
	// whether it still has a box (by name): an engine-held slot
	// (EngineHeld) whose supervisor is gone is taken back only when the
	// engine answers no. nil: such slots are kept. It asks whether a box
	// of that name exists in any state, of any instance: a slot stays its
	// box's while any of its processes may run, and an allocation has no
	// instance to List (reconcile's question) and no entry to Sweep.
	EngineHas func(box string) (bool, error)
	// only, when set, says which slots Allocate may take (by their
	// first uid and gid): Only.
	only func(uid, gid int64) bool
}

// Root are a root supervisor's slots of the block at Base, in dir;
// etc is where the host's account files are (/etc).
func Root(dir, etc string) *Ranges {
	return &Ranges{dir: dir, taken: hostIDSpans(etc), base: Base, size: Size, slots: Slots,
		where: fmt.Sprintf("host ids %d-%d", int64(Base), int64(Base)+Size*Slots-1)}
}

// Sub are slots of size ids each in a range the caller was given (an
// unprivileged user's subordinate ids): uids from uidBase, gids from
// gidBase, count slots, lock files in dir; where names the range in a
// refusal.
func Sub(dir string, uidBase, gidBase, size, count int64, where string) *Ranges {
	return &Ranges{dir: dir, base: uidBase, gidBase: gidBase, size: size, slots: count, where: where}
}

// Only is r taking, in Allocate, only the slots whose first uid and
// gid ok accepts (an engine whose namespace maps part of the range);
// Release, Holds and the lock files know every slot, so boxes of r and
// of the whole range never share one.
func (r *Ranges) Only(ok func(uid, gid int64) bool) *Ranges {
	c := *r
	c.only = ok
	return &c
}

// Count is how many slots there are.
func (r *Ranges) Count() int64 { return r.slots }

// Where names the ids the slots come from.
func (r *Ranges) Where() string { return r.where }

// GIDStart is the first gid of the slot whose first uid is start (as
// root a box's gids are its uids).
func (r *Ranges) GIDStart(start int64) int64 {
	if r.gidBase == 0 {
		return start
	}
	return r.gidBase + r.SlotOf(start)*r.size
}

type idSpan struct{ start, count int64 }

func (s idSpan) overlaps(o idSpan) bool {
	return s.start < o.start+o.count && o.start < s.start+s.count
}

// hostIDSpans reads the ids the host hands out: /etc/subuid and
// /etc/subgid ranges, /etc/passwd and /etc/group ids. Missing files
// hold nothing.
func hostIDSpans(etc string) []idSpan {
	var out []idSpan
	each := func(file string, f func([]string)) {
		fh, err := os.Open(filepath.Join(etc, file))
		if err != nil {
			return
		}
		defer fh.Close()
		s := bufio.NewScanner(fh)
		for s.Scan() {
			f(strings.Split(strings.TrimSpace(s.Text()), ":"))
		}
	}
	for _, file := range []string{"subuid", "subgid"} {
		each(file, func(p []string) {
			if len(p) == 3 {
				s, err1 := strconv.ParseInt(p[1], 10, 64)
				c, err2 := strconv.ParseInt(p[2], 10, 64)
				if err1 == nil && err2 == nil && c > 0 {
					out = append(out, idSpan{s, c})
				}
			}
		})
	}
	for _, file := range []string{"passwd", "group"} {
		each(file, func(p []string) {
			if len(p) > 2 {
				if id, err := strconv.ParseInt(p[2], 10, 64); err == nil {
					out = append(out, idSpan{id, 1})
				}
			}
		})
	}
	return out
}

// slotStart is the first host id of slot i.
func (r *Ranges) slotStart(i int64) int64 { return r.base + i*r.size }

// SlotOf is the slot whose range starts at host id start, or -1.
func (r *Ranges) SlotOf(start int64) int64 {
	if start < r.base || (start-r.base)%r.size != 0 {
		return -1
	}
	i := (start - r.base) / r.size
	if i >= r.slots {
		return -1
	}
	return i
}

// slotHolder is what a slot's lock file says: the box, the supervisor
// that took the slot and the box's init, each a pid and its start time
// (0: not recorded), and whether the box's init is an engine's
// (engineHeld: its pid is never recorded; EngineHeld).
type slotHolder struct {
	box                   string
	owner, initPID        int
	ownerStart, initStart uint64
	engineHeld            bool
}

// parseHolder reads a lock file: the box's name, then "owner PID START",
// "engine-held" and "init PID START" lines.
func parseHolder(b []byte) (h slotHolder) {
	ls := strings.Split(strings.TrimSpace(string(b)), "\n")
	h.box = strings.TrimSpace(ls[0])
	for _, l := range ls[1:] {
		if strings.TrimSpace(l) == engineHeldLine {
			h.engineHeld = true
			continue
		}
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		pid, err1 := strconv.Atoi(f[1])
		st, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil || pid <= 0 {
			continue
		}
		switch f[0] {
		case "owner":
			h.owner, h.ownerStart = pid, st
		case "init":
			h.initPID, h.initStart = pid, st
		}
	}
	return h
}

// running reports whether pid is the process that started at start
// (and has not exited).
func running(pid int, start uint64) bool {
	got, err := proc.StartTime(pid)
	return err == nil && got == start && !proc.Zombie(pid)
}

// engineHeldLine marks a slot whose box's init is an engine's
// (EngineHeld).
const engineHeldLine = "engine-held"

// gone reports whether the slot's holder is provably gone, so that the
// next allocation takes the slot back (a SIGKILLed supervisor whose
// entry was never reconciled): the lock file names the supervisor that
// took it, that process has ended, and so has the box's init (the box's
// PID 1: without it the box cannot run) when one was recorded, or, for
// an engine-held slot, the engine no longer has the box (engineHas; nil
// or an engine that cannot say: kept). A file that names no supervisor
// (an older format, or a torn write) is never taken back.
func (h slotHolder) gone(engineHas func(string) (bool, error)) bool {
	if h.owner == 0 {
		return false
	}
	if running(h.owner, h.ownerStart) {
		return false
	}
	if h.initPID != 0 {
		return !running(h.initPID, h.initStart)
	}
	if !h.engineHeld {
		return true
	}
	if engineHas == nil {
		return false
	}
	has, err := engineHas(h.box)
	return err == nil && !has
}

// selfLine is this supervisor's "owner PID START" line.
func selfLine() (string, error) {
	st, err := proc.StartTime(os.Getpid())
	if err != nil {
		return "", fmt.Errorf("start time of the supervisor: %w", err)
	}
	return fmt.Sprintf("owner %d %d\n", os.Getpid(), st), nil
}

// lockDir takes an exclusive lock on the slot folder (against two
// supervisors taking back the same stale slot) until unlock is called.
func (r *Ranges) lockDir() (unlock func(), err error) {
	if err := trusted.EnsureDir(r.dir); err != nil {
		return nil, err
	}
	fd, err := unix.Open(r.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, os.NewSyscallError("open "+r.dir, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("flock "+r.dir, err)
	}
	return func() { unix.Close(fd) }, nil
}

// takeable reports whether Allocate may hand out slot i: it overlaps
// no id of the host's and Only accepts it.
func (r *Ranges) takeable(i int64) bool {
	span := idSpan{r.slotStart(i), r.size}
	for _, t := range r.taken {
		if span.overlaps(t) {
			return false
		}
	}
	return r.only == nil || r.only(span.start, r.GIDStart(span.start))
}

// Takeable is how many slots Allocate may hand out, held or not.
func (r *Ranges) Takeable() int64 {
	n := int64(0)
	for i := int64(0); i < r.slots; i++ {
		if r.takeable(i) {
			n++
		}
	}
	return n
}

// Allocate takes the first free slot for box and returns its first
// host id. Slots whose holder is provably gone are taken back first.
func (r *Ranges) Allocate(box string) (int64, error) {
	owner, err := selfLine()
	if err != nil {
		return 0, err
	}
	unlock, err := r.lockDir()
	if err != nil {
		return 0, err
	}
	defer unlock()
	r.reclaim()
	for i := int64(0); i < r.slots; i++ {
		if !r.takeable(i) {
			continue
		}
		span := idSpan{r.slotStart(i), r.size}
		p := filepath.Join(r.dir, strconv.FormatInt(i, 10))
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("take host id slot %d: %w", i, os.NewSyscallError("open "+p, err))
		}
		_, werr := unix.Write(fd, []byte(box+"\n"+owner))
		unix.Close(fd)
		if werr != nil {
			os.Remove(p)
			return 0, fmt.Errorf("take host id slot %d: %w", i, werr)
		}
		return span.start, nil
	}
	return 0, fmt.Errorf("all %d host id slots of boxes (%s) are held by boxes that still exist (%s); end or remove some (supervisor reconcile), or give the user a larger subordinate range", r.slots, r.where, r.dir)
}

// reclaim removes the lock files whose holder is provably gone. The
// caller holds the folder's lock.
func (r *Ranges) reclaim() {
	es, err := os.ReadDir(r.dir)
	if err != nil {
		return
	}
	for _, e := range es {
		i, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || i < 0 || i >= r.slots {
			continue
		}
		p := filepath.Join(r.dir, e.Name())
		b, err := trusted.ReadFile(p, 4096)
		if err == nil && parseHolder(b).gone(r.EngineHas) {
			os.Remove(p)
		}
	}
}

// Started records the box's init (pid) in the lock file of the slot
// at host id start that box holds, before the init may run anything.
func (r *Ranges) Started(box string, start int64, pid int) error {
	st, err := proc.StartTime(pid)
	if err != nil {
		return fmt.Errorf("start time of the box's init: %w", err)
	}
	return r.appendLine(box, start, fmt.Sprintf("init %d %d\n", pid, st))
}

// EngineHeld marks the slot at host id start that box holds as one
// whose box's init an engine starts (its pid never recorded): once the
// supervisor is gone the slot is kept while the engine still has the
// box (a box dying within its kill bound, or stalled), asked through
// EngineHas at the next allocation; the box's removal frees it. It
// must come before the box exists.
func (r *Ranges) EngineHeld(box string, start int64) error {
	return r.appendLine(box, start, engineHeldLine+"\n")
}

// appendLine adds line to the lock file of the slot at host id start,
// which box must hold, under the folder's lock (no release or
// allocation runs meanwhile).
func (r *Ranges) appendLine(box string, start int64, line string) error {
	i := r.SlotOf(start)
	if i < 0 {
		return fmt.Errorf("host id range %d is not one of the boxes' slots", start)
	}
	return r.locked(func() error { return r.appendSlot(box, i, line) })
}

func (r *Ranges) appendSlot(box string, i int64, line string) error {
	p := filepath.Join(r.dir, strconv.FormatInt(i, 10))
	b, err := trusted.ReadFile(p, 4096)
	if err != nil {
		return err
	}
	if parseHolder(b).box != box {
		return fmt.Errorf("host id slot %d is not held by box %s", i, box)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(line)
	return err
}

// Release frees the slot at host id start when box holds it. A slot
// held by another box is left alone.
func (r *Ranges) Release(box string, start int64) error {
	i := r.SlotOf(start)
	if i < 0 {
		return fmt.Errorf("box state: host id range %d is not one of the boxes' ranges", start)
	}
	return r.locked(func() error { return r.releaseSlot(box, i) })
}

// ReleaseAll frees every slot that box holds.
func (r *Ranges) ReleaseAll(box string) error {
	return r.locked(func() error {
		es, err := os.ReadDir(r.dir)
		if err != nil {
			return err
		}
		for _, e := range es {
			i, err := strconv.ParseInt(e.Name(), 10, 64)
			if err != nil || i < 0 || i >= r.slots {
				continue
			}
			if err := r.releaseSlot(box, i); err != nil {
				return err
			}
		}
		return nil
	})
}

// locked runs f holding the slot folder's lock (so that no allocation
// takes the slot back meanwhile); a folder that does not exist holds
// no slot.
func (r *Ranges) locked(f func() error) error {
	if _, err := os.Lstat(r.dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	unlock, err := r.lockDir()
	if err != nil {
		return err
	}
	defer unlock()
	return f()
}

// releaseSlot removes slot i's lock file when box holds it.
func (r *Ranges) releaseSlot(box string, i int64) error {
	p := filepath.Join(r.dir, strconv.FormatInt(i, 10))
	b, err := trusted.ReadFile(p, 4096)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if parseHolder(b).box != box {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Holds reports whether box holds the slot whose start is the decimal
// state value st (a second Create of the same box keeps its range).
func (r *Ranges) Holds(box, st string) bool {
	start, err := strconv.ParseInt(st, 10, 64)
	if err != nil || r.SlotOf(start) < 0 {
		return false
	}
	b, err := trusted.ReadFile(filepath.Join(r.dir, strconv.FormatInt(r.SlotOf(start), 10)), 4096)
	return err == nil && parseHolder(b).box == box
}
