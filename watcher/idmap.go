package watcher

import (
	"strconv"
	"strings"
)

// unmapped says which of the agent's ids the box's user namespace does
// not map ("uid 70000", "uid 70000 and gid 70000"), with the ranges it
// does map, or "" when both are mapped or the maps cannot be read.
// The maps are read with readFile, not os.ReadFile: its File.Stat is
// the watcher's only os.FileInfo, which links the time zone loader and
// time's formatting into PID 1's binary.
func unmapped(uid, gid uint32) string {
	um, err1 := readFile("/proc/self/uid_map")
	gm, err2 := readFile("/proc/self/gid_map")
	if err1 != nil || err2 != nil {
		return ""
	}
	return unmappedIn(string(um), string(gm), uid, gid)
}

// unmappedIn is unmapped over the text of uid_map and gid_map.
func unmappedIn(uidMap, gidMap string, uid, gid uint32) string {
	var out []string
	for _, c := range []struct {
		kind, m string
		id      uint32
	}{{"uid", uidMap, uid}, {"gid", gidMap, gid}} {
		ok, ranges := inMap(c.m, c.id)
		if !ok {
			out = append(out, c.kind+" "+strconv.FormatUint(uint64(c.id), 10)+" (the box maps "+c.kind+"s "+ranges+")")
		}
	}
	return strings.Join(out, " and ")
}

// inMap reports whether id is inside one of the map's ranges (fields:
// inside, outside, count), and spells the ranges ("0-65535").
func inMap(m string, id uint32) (bool, string) {
	var ranges []string
	in := false
	for _, line := range strings.Split(strings.TrimSpace(m), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		start, err1 := strconv.ParseUint(f[0], 10, 32)
		n, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || n == 0 {
			continue
		}
		ranges = append(ranges, strconv.FormatUint(start, 10)+"-"+strconv.FormatUint(start+n-1, 10))
		if uint64(id) >= start && uint64(id) < start+n {
			in = true
		}
	}
	return in, strings.Join(ranges, ", ")
}
