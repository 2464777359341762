package native

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeKernel is a kernel of release major.minor that has every feature
// whose documented minimum is at most its own: the minimums are the
// ones kernel.org's release notes give, written out here rather than
// read back from the table.
func fakeKernel(release string) kernelProbe {
	since := map[string]string{
		"user namespaces":                  "3.8",
		"seccomp SECCOMP_RET_KILL_PROCESS": "4.14",
		"open_tree and move_mount":         "5.2",
		"pidfd_open":                       "5.3",
		"openat2 RESOLVE_IN_ROOT":          "5.6",
		"clone3 CLONE_INTO_CGROUP":         "5.7",
		"mount_setattr":                    "5.12",
		"Landlock":                         "5.13",
		"cgroup.kill":                      "5.14",
	}
	num := func(v string) int {
		maj, min, _ := strings.Cut(v, ".")
		a, _ := strconv.Atoi(maj)
		b, _ := strconv.Atoi(min)
		return a*1000 + b
	}
	return func(name string) error {
		s, ok := since[name]
		if !ok {
			return errors.New("the fake kernel knows no " + name)
		}
		if num(s) > num(release) {
			return unix.ENOSYS
		}
		return nil
	}
}

func TestKernelFeatureMinimums(t *testing.T) {
	probe := fakeKernel("0.0")
	for _, f := range kernelFeatures {
		// Every feature of the table is one the fake knows, at the
		// minimum the table states.
		if err := probe(f.Name); !errors.Is(err, unix.ENOSYS) {
			t.Errorf("%s: the fake kernel does not know it (%v)", f.Name, err)
		}
		if fakeKernel(f.Since)(f.Name) != nil {
			t.Errorf("%s: the table says Linux %s, the release notes a later one", f.Name, f.Since)
		}
	}
}

func TestCheckKernel(t *testing.T) {
	for _, c := range []struct {
		release      string
		v2           bool
		usable       bool
		missing      []string // named in the refusal
		degraded     []string // named in doctor's walls
		notMentioned []string
		clean        bool // nothing missing at all
	}{
		{release: "6.1", v2: true, usable: true, clean: true},
		{release: "5.14", v2: true, usable: true, clean: true},
		{release: "5.13", v2: true, usable: true, degraded: []string{"cgroup.kill (Linux 5.14+)"}, notMentioned: []string{"Landlock"}},
		{release: "5.12", v2: false, usable: true, degraded: []string{"Landlock (Linux 5.13+)"}, notMentioned: []string{"cgroup.kill"}},
		// Debian bullseye: no mount_setattr, so no native box at all.
		{release: "5.10", v2: true, usable: false, missing: []string{"mount_setattr (Linux 5.12+)"}, degraded: []string{"Landlock", "cgroup.kill"}},
		{release: "5.10", v2: false, usable: false, missing: []string{"mount_setattr"}, notMentioned: []string{"CLONE_INTO_CGROUP", "cgroup.kill"}},
		{release: "5.4", v2: true, usable: false, missing: []string{"openat2 RESOLVE_IN_ROOT (Linux 5.6+)", "clone3 CLONE_INTO_CGROUP (Linux 5.7+)", "mount_setattr"}},
		{release: "5.4", v2: false, usable: false, missing: []string{"openat2"}, notMentioned: []string{"CLONE_INTO_CGROUP"}},
		{release: "4.19", v2: false, usable: false, missing: []string{"open_tree and move_mount (Linux 5.2+)"}, degraded: []string{"pidfd_open (Linux 5.3+)"}},
	} {
		k := checkKernel(c.v2, fakeKernel(c.release))
		r := k.refusal(c.release + ".0-test")
		if (r == "") != c.usable {
			t.Errorf("%s v2=%v: refusal %q, want usable=%v", c.release, c.v2, r, c.usable)
		}
		if r != "" && !strings.Contains(r, "kernel "+c.release+".0-test") {
			t.Errorf("%s: the refusal does not name the kernel: %q", c.release, r)
		}
		for _, m := range c.missing {
			if !strings.Contains(r, m) {
				t.Errorf("%s v2=%v: refusal %q does not name %q", c.release, c.v2, r, m)
			}
		}
		walls := strings.Join(k.Degraded, "\n")
		for _, d := range c.degraded {
			if !strings.Contains(walls, d) {
				t.Errorf("%s v2=%v: degraded %q does not name %q", c.release, c.v2, walls, d)
			}
		}
		if c.clean && len(k.Degraded)+len(k.Missing) > 0 {
			t.Errorf("%s v2=%v: degraded %q, want none", c.release, c.v2, walls)
		}
		for _, n := range c.notMentioned {
			if strings.Contains(r+walls, n) {
				t.Errorf("%s v2=%v: %q names %q", c.release, c.v2, r+walls, n)
			}
		}
	}
}

// Every feature of the table has a probe of this kernel, and the
// probes answer without side effects.
func TestHostKernelProbe(t *testing.T) {
	probe := hostKernelProbe("/sys/fs/cgroup/unified")
	for _, f := range kernelFeatures {
		err := probe(f.Name)
		if err != nil && strings.HasPrefix(err.Error(), "no probe") {
			t.Errorf("%s: %v", f.Name, err)
		}
		t.Logf("%s (Linux %s+): %v", f.Name, f.Since, err)
	}
	if err := probe("mount_setattr"); err != nil {
		t.Errorf("mount_setattr on this kernel: %v", err)
	}
	if err := probe("clone3 CLONE_INTO_CGROUP"); err != nil {
		t.Errorf("clone3 CLONE_INTO_CGROUP on this kernel: %v", err)
	}
}

func TestReleaseAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{
		"6.1.0-28-amd64": true, "5.14.0-427.el9.x86_64": true, "5.10.0-33-amd64": false,
		"5.4": false, "4.19.0": false, "10.0": true, "5.15rc1": true, "junk": false,
	} {
		if got := releaseAtLeast(rel, 5, 14); got != want {
			t.Errorf("releaseAtLeast(%q, 5, 14) = %v, want %v", rel, got, want)
		}
	}
}
