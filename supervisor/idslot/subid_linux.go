package idslot

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// UserSlotIDs is the size of an unprivileged user's slot: the agent's
// id and the watcher's.
const UserSlotIDs = 2

// User are an unprivileged user's (uid's) slots: UserSlotIDs ids each
// of the user's subordinate ranges in /etc/subuid and /etc/subgid
// (read now: they may have changed), lock files in dir. Every runtime
// that runs the user's boxes on those ids (native, rootless Docker)
// takes its slots from one dir, so their boxes never share ids.
func User(dir string, uid int) (*Ranges, error) {
	us, uc, err := SubIDRange("/etc/subuid", uid)
	if err != nil {
		return nil, err
	}
	gs, gc, err := SubIDRange("/etc/subgid", uid)
	if err != nil {
		return nil, err
	}
	n := min(uc, gc)
	return Sub(dir, int64(us), int64(gs), UserSlotIDs, int64(n/UserSlotIDs),
		fmt.Sprintf("the user's subordinate ids %d-%d in /etc/subuid", us, us+n-1)), nil
}

// SubIDRange finds the subordinate id range of the user uid in an
// /etc/subuid-style file: its first range of at least 65536 ids, named
// by the user's name or uid. An unprivileged user's boxes take their
// slots from it on every runtime (native, rootless Docker), so they
// count the slots alike.
func SubIDRange(file string, uid int) (start, count int, err error) {
	name := strconv.Itoa(uid)
	if u, err := lookupUserName(uid); err == nil {
		name = u
	}
	f, err := os.Open(file)
	if err != nil {
		return 0, 0, fmt.Errorf("no subordinate ids for user %s (%w): the agent's uid cannot be mapped into the box; add a range with usermod --add-subuids/--add-subgids", name, err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		start, count, ok := parseSubIDLine(s.Text(), name, uid)
		if ok && count >= 65536 {
			return start, count, nil
		}
	}
	return 0, 0, fmt.Errorf("no subordinate id range of 65536 for user %s in %s: the agent's uid cannot be mapped into the box; add one with usermod --add-subuids 100000-165535 --add-subgids 100000-165535 %s", name, file, name)
}

// parseSubIDLine reads "name:start:count" when it is for user name or uid.
func parseSubIDLine(line, name string, uid int) (start, count int, ok bool) {
	f := strings.Split(strings.TrimSpace(line), ":")
	if len(f) != 3 || (f[0] != name && f[0] != strconv.Itoa(uid)) {
		return 0, 0, false
	}
	s, err1 := strconv.Atoi(f[1])
	c, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || s < 0 || c <= 0 {
		return 0, 0, false
	}
	return s, c, true
}

func lookupUserName(uid int) (string, error) {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		p := strings.Split(s.Text(), ":")
		if len(p) > 2 && p[2] == strconv.Itoa(uid) {
			return p[0], nil
		}
	}
	return "", fmt.Errorf("uid %d not in /etc/passwd", uid)
}
