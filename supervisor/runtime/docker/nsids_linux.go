package docker

import (
	"deathwatch/supervisor/journal"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"deathwatch/supervisor"
	"deathwatch/supervisor/idslot"
)

// A rootless docker daemon runs in a user namespace of its user
// (rootlesskit's: uid 0 is the user, 1… the user's subordinate ids),
// and its boxes share that namespace: without more, uid 1000 in every
// box is one host id. Each box takes a slot of the user's subordinate
// ids instead, from the folder the user's native boxes take theirs
// from (idslot.User), and runs as that slot's ids as the daemon's
// namespace names them. Only slots that the namespace names within
// nsSlotLow … nsSlotHigh-1 are taken: above the ids images give their
// users and files (root, system accounts, 1000), below the watcher's
// default id, nobody and the 16-bit -1.
const (
	nsSlotLow  = 1 << 15
	nsSlotHigh = 65533
)

// idExtent is one line of a user namespace's uid_map or gid_map: the
// ids inside … inside+count-1 are outside … on the host.
type idExtent struct{ inside, outside, count int64 }

// parseIDMap reads the text of /proc/PID/uid_map or gid_map; lines it
// cannot read map nothing.
func parseIDMap(text string) []idExtent {
	var m []idExtent
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		var v [3]int64
		ok := true
		for i := range f {
			n, err := strconv.ParseInt(f[i], 10, 64)
			ok = ok && err == nil && n >= 0
			v[i] = n
		}
		if ok && v[2] > 0 {
			m = append(m, idExtent{v[0], v[1], v[2]})
		}
	}
	return m
}

// insideOf is the id that the namespace of map m gives host id host.
func insideOf(m []idExtent, host int64) (int64, bool) {
	for _, e := range m {
		if host >= e.outside && host < e.outside+e.count {
			return e.inside + host - e.outside, true
		}
	}
	return 0, false
}

// daemonIDs are a rootless docker daemon's user namespace, as its
// boxes' ids need it: the namespace's maps and the slots its boxes
// take.
type daemonIDs struct {
	uids, gids []idExtent
	slots      *idslot.Ranges
}

// newDaemonIDs are the ids of the daemon whose namespace maps uids and
// gids, with slots of the user's ranges r.
func newDaemonIDs(uids, gids []idExtent, r *idslot.Ranges) *daemonIDs {
	d := &daemonIDs{uids: uids, gids: gids}
	d.slots = r.Only(func(u, g int64) bool { _, _, ok := d.inside(u, g); return ok })
	return d
}

// inside names the slot at host uid u and gid g (two ids each) as the
// daemon's namespace does; false when either pair is not two
// consecutive ids within nsSlotLow … nsSlotHigh-1 there.
func (d *daemonIDs) inside(u, g int64) (uid, gid int64, ok bool) {
	pair := func(m []idExtent, host int64) (int64, bool) {
		a, ok1 := insideOf(m, host)
		b, ok2 := insideOf(m, host+1)
		return a, ok1 && ok2 && b == a+1 && a >= nsSlotLow && b < nsSlotHigh
	}
	uid, uok := pair(d.uids, u)
	gid, gok := pair(d.gids, g)
	return uid, gid, uok && gok
}

// userSlotDir is where this user's boxes keep their slots' lock files:
// the native runtime's folder (native.RootlessIDSlotDir of its default
// state folder), so a native box and a rootless docker box of the user
// never share ids.
func userSlotDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "deathwatch", "idslots")
	}
	if d := journal.DefaultDir(); d != "" {
		return filepath.Join(d, "idslots")
	}
	return ""
}

// errNoSlotDir: this user has no folder for its slots' lock files.
var errNoSlotDir = errors.New("no folder for the boxes' id slots: set XDG_RUNTIME_DIR or HOME")

// userSlots are this user's slots (idslot.User in userSlotDir).
func userSlots() (*idslot.Ranges, error) {
	dir := userSlotDir()
	if dir == "" {
		return nil, errNoSlotDir
	}
	return idslot.User(dir, os.Geteuid())
}

// settleDaemonIDs decides, for a rootless docker daemon, whether its
// boxes take ids of their own (e.daemonIDs), or says in info.Detail why
// they share the daemon's. It is asked of a daemon that listens on a
// local socket as this process's uid (the user's own daemon, whose
// namespace maps the user's subordinate ids); any other's ids are not
// this user's to hand out.
func (e *Engine) settleDaemonIDs(c *apiClient, info *supervisor.Info) {
	if e.Kind != "docker" || !info.Rootless || c.ep.Scheme != "unix" {
		return
	}
	uid, pid, ok := c.listener()
	if !ok || pid <= 0 || uid != os.Geteuid() {
		e.log().Debug("rootless docker ids", "listener uid", uid, "pid", pid, "per-box ids", false)
		return
	}
	um, err1 := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/uid_map")
	gm, err2 := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/gid_map")
	if err1 != nil || err2 != nil {
		info.Detail = dockerRootlessShared("the daemon's user namespace (pid "+strconv.Itoa(pid)+") cannot be read", "run the supervisor where it can read /proc/PID/uid_map of the daemon")
		return
	}
	r, err := userSlots()
	if err != nil {
		info.Detail = dockerRootlessShared("this user has no slots of ids for boxes ("+err.Error()+")", "give the user 65536 subordinate ids and restart the daemon")
		return
	}
	d, why := daemonSlots(string(um), string(gm), r)
	if d == nil {
		info.Detail = why
		return
	}
	e.daemonIDs = d
}

// daemonSlots are the ids of the daemon whose namespace maps uidMap and
// gidMap (the text of its uid_map and gid_map) with slots of the user's
// ranges r, or nil and the statement that says why its boxes share ids:
// the namespace names fewer than two slots within the block.
func daemonSlots(uidMap, gidMap string, r *idslot.Ranges) (*daemonIDs, string) {
	d := newDaemonIDs(parseIDMap(uidMap), parseIDMap(gidMap), r)
	if d.slots.Takeable() < 2 {
		return nil, dockerRootlessShared("the daemon's user namespace does not map ids "+strconv.Itoa(nsSlotLow)+"-"+strconv.Itoa(nsSlotHigh-1)+" onto the user's subordinate ids in /etc/subuid and /etc/subgid", "give the user at least 65536 (e.g. USER:100000:65536) and restart the daemon so each box gets ids of its own")
	}
	return d, ""
}

// heldSlots are the slots that hold a box's journaled first id start:
// the host-id blocks of an engine that runs boxes on the host's own
// ids, or this user's subordinate ids (a rootless docker box's).
func heldSlots(start int64) (*idslot.Ranges, error) {
	r, err := ownIDSlots(os.Geteuid(), envMap(os.Environ()))
	if err == nil && r.SlotOf(start) >= 0 {
		return r, nil
	}
	if os.Geteuid() != 0 {
		if u, uerr := userSlots(); uerr == nil && u.SlotOf(start) >= 0 {
			return u, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}
