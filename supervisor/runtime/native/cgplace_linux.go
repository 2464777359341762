package native

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Where an unprivileged supervisor's box cgroups go on cgroup v2. It may
// write only below a folder delegated to it (systemd: the user's
// user@UID.service, or a unit with Delegate=yes), and cgroup v2 lets a
// process start a child in a cgroup (clone3 CLONE_INTO_CGROUP) or move
// one there only when it may write cgroup.procs of the common ancestor
// of the source and the destination: the box's cgroup must share a
// delegated ancestor with the supervisor's own. So the parent is found
// from the supervisor's own cgroup upwards: the nearest folder above it
// that the user may write and that holds no process of its own (the
// no-internal-process rule), and the boxes go into its DelegatedParent.

// DelegatedParent is the folder an unprivileged supervisor makes for its
// boxes in the delegated cgroup it found.
const DelegatedParent = "deathwatch"

// cgroupTree is what the parent's search reads of a v2 hierarchy
// (paths below its mount); a fake stands in for it in tests.
type cgroupTree interface {
	// Delegated: the caller may make folders in dir and write its
	// cgroup.procs and cgroup.subtree_control.
	Delegated(dir string) bool
	// HasProcs: dir holds processes of its own.
	HasProcs(dir string) bool
}

// hostCgroupTree is the v2 hierarchy mounted at root.
type hostCgroupTree struct{ root string }

func (h hostCgroupTree) Delegated(dir string) bool {
	d := filepath.Join(h.root, dir)
	for _, p := range []string{d, filepath.Join(d, "cgroup.procs"), filepath.Join(d, "cgroup.subtree_control")} {
		if unix.Access(p, unix.W_OK) != nil {
			return false
		}
	}
	return true
}

func (h hostCgroupTree) HasProcs(dir string) bool {
	b, err := os.ReadFile(filepath.Join(h.root, dir, "cgroup.procs"))
	return err != nil || strings.TrimSpace(string(b)) != ""
}

// ownCgroupV2 is the v2 cgroup named by the contents of
// /proc/self/cgroup (its "0::" line), or "".
func ownCgroupV2(procCgroup string) string {
	for _, line := range strings.Split(procCgroup, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && path.IsAbs(p) {
			return path.Clean(p)
		}
	}
	return ""
}

// selfCgroupV2 is the supervisor's own v2 cgroup.
func selfCgroupV2() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read the supervisor's own cgroup: %w", err)
	}
	if s := ownCgroupV2(string(b)); s != "" {
		return s, nil
	}
	return "", fmt.Errorf("the supervisor's own cgroup: /proc/self/cgroup names no cgroup v2 path")
}

// delegatedParent finds an unprivileged supervisor's box parent from its
// own cgroup self (see above); the error says where it looked and what
// to do.
func delegatedParent(self string, uid int, t cgroupTree) (string, error) {
	for d := path.Dir(self); d != self && t.Delegated(d); d = path.Dir(d) {
		if !t.HasProcs(d) {
			return path.Join(d, DelegatedParent), nil
		}
		if d == "/" {
			break
		}
	}
	hint := "run it inside the user's systemd manager (systemd-run --user --scope …), or in a unit with Delegate=yes whose own processes sit in a child cgroup (DelegateSubgroup=), or set " + EnvCgroupParent + " to a delegated cgroup that shares a delegated ancestor with it"
	if ud := fmt.Sprintf("/user.slice/user-%d.slice/user@%d.service", uid, uid); t.Delegated(ud) && !under(self, ud) {
		hint = fmt.Sprintf("uid %d's delegated cgroup is %s, outside which the supervisor runs: start it there (systemd-run --user --scope …)", uid, ud)
	}
	return "", fmt.Errorf("no delegated cgroup v2 for uid %d's boxes: none of the folders above the supervisor's own cgroup %s is this user's and free of processes; %s", uid, self, hint)
}

// commonAncestor is the deepest cgroup that holds both a and b.
func commonAncestor(a, b string) string {
	for a != "/" && !under(b, a) {
		a = path.Dir(a)
	}
	return a
}

// checkCloneInto refuses, before any clone3(CLONE_INTO_CGROUP), a box
// cgroup group that the supervisor in cgroup self may not start a child
// in: cgroup v2 requires write access to cgroup.procs of the common
// ancestor of both.
func checkCloneInto(self, group string, uid int, t cgroupTree) error {
	c := commonAncestor(self, group)
	if t.Delegated(c) {
		return nil
	}
	return fmt.Errorf("cgroup v2 starts the box's init straight into %s (clone3 CLONE_INTO_CGROUP), which the kernel allows only to a writer of cgroup.procs in the common ancestor of that cgroup and the supervisor's own (%s): %s is not uid %d's; run the supervisor inside the delegated cgroup, or pick a parent that shares a delegated ancestor with it", group, self, c, uid)
}

// checkCloneIntoSelf is checkCloneInto for this supervisor and the box
// cgroup of spec.
func checkCloneIntoSelf(spec cgroupSpec) error {
	self, err := selfCgroupV2()
	if err != nil {
		return err
	}
	return checkCloneInto(self, spec.Group, os.Geteuid(), hostCgroupTree{spec.Root})
}
