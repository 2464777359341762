package native

import (
	"bufio"
	"deathwatch/supervisor"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A root supervisor gives every box a user namespace of its own, mapped
// onto a dedicated block of host ids that no account, file or process of
// the host uses: box id i is host id IDRangeBase + slot·IDRangeSize + i.
// The block starts at 2^31, above where useradd and /etc/subuid put
// anything (both stay below 2^31 by default), and slots that overlap a
// range in /etc/subuid, /etc/subgid or an id in /etc/passwd, /etc/group
// are skipped. A slot is held by a lock file (created O_EXCL, holding
// the box name) while the box exists, so two live boxes never share a
// host uid; Remove (and so reconcile) releases it.
const (
	IDRangeBase  = 1 << 31
	IDRangeSize  = 65536
	IDRangeSlots = 4096 // 2^31 … 2^31+2^28: well inside the 32-bit id space
)

// StateIDRange is the box's host id range start, journaled so that
// Remove (and reconcile) releases the slot.
const StateIDRange = "id-range"

// DefaultIDRangeDir holds the slot lock files (tmpfs: a reboot frees all).
const DefaultIDRangeDir = "/run/deathwatch/idranges"

// idRanges allocates host id ranges for boxes.
type idRanges struct {
	dir string
	// taken reports host ids already in use on the host (accounts,
	// subordinate ranges): a slot that overlaps one is never used.
	taken []idSpan
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
func slotStart(i int) int64 { return IDRangeBase + int64(i)*IDRangeSize }

// slotOf is the slot whose range starts at host id start, or -1.
func slotOf(start int64) int {
	if start < IDRangeBase || (start-IDRangeBase)%IDRangeSize != 0 {
		return -1
	}
	i := (start - IDRangeBase) / IDRangeSize
	if i >= IDRangeSlots {
		return -1
	}
	return int(i)
}

// allocate takes the first free slot for box and returns its first host id.
func (r *idRanges) allocate(box string) (int64, error) {
	if err := supervisor.EnsureTrustedDir(r.dir); err != nil {
		return 0, err
	}
	for i := 0; i < IDRangeSlots; i++ {
		span := idSpan{slotStart(i), IDRangeSize}
		clash := false
		for _, t := range r.taken {
			if span.overlaps(t) {
				clash = true
				break
			}
		}
		if clash {
			continue
		}
		p := filepath.Join(r.dir, strconv.Itoa(i))
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("take host id range %d: %w", i, os.NewSyscallError("open "+p, err))
		}
		_, werr := unix.Write(fd, []byte(box+"\n"))
		unix.Close(fd)
		if werr != nil {
			os.Remove(p)
			return 0, fmt.Errorf("take host id range %d: %w", i, werr)
		}
		return span.start, nil
	}
	return 0, fmt.Errorf("all %d host id ranges of boxes are taken (%s); remove boxes or run reconcile", IDRangeSlots, r.dir)
}

// release frees the slot at host id start when box holds it. A slot
// held by another box is left alone.
func (r *idRanges) release(box string, start int64) error {
	i := slotOf(start)
	if i < 0 {
		return fmt.Errorf("box state: host id range %d is not one of the boxes' ranges", start)
	}
	p := filepath.Join(r.dir, strconv.Itoa(i))
	b, err := supervisor.ReadTrustedFile(p, 4096)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(b)) != box {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// releaseAll frees every slot that box holds.
func (r *idRanges) releaseAll(box string) error {
	es, err := os.ReadDir(r.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range es {
		i, err := strconv.Atoi(e.Name())
		if err != nil || i < 0 || i >= IDRangeSlots {
			continue
		}
		if err := r.release(box, slotStart(i)); err != nil {
			return err
		}
	}
	return nil
}

// holds reports whether box holds the slot whose start is the decimal
// state value st (a second Create of the same box keeps its range).
func (r *idRanges) holds(box, st string) bool {
	start, err := strconv.ParseInt(st, 10, 64)
	if err != nil || slotOf(start) < 0 {
		return false
	}
	b, err := supervisor.ReadTrustedFile(filepath.Join(r.dir, strconv.Itoa(slotOf(start))), 4096)
	return err == nil && strings.TrimSpace(string(b)) == box
}
