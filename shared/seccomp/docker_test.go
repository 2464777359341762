package seccomp

import (
	"encoding/json"
	"os"
	"testing"
)

// testdata/docker-default.json is Docker's default seccomp profile as
// github.com/moby/profiles has it at commit 3c28324 (seccomp/default.json,
// last changed 2026-05-06).

// dockerProfile is the part of the profile the comparison reads.
type dockerProfile struct {
	Syscalls []struct {
		Names    []string `json:"names"`
		Action   string   `json:"action"`
		Args     []any    `json:"args"`
		Includes struct {
			Caps   []string `json:"caps"`
			Arches []string `json:"arches"`
		} `json:"includes"`
		Excludes struct {
			Caps []string `json:"caps"`
		} `json:"excludes"`
	} `json:"syscalls"`
}

// class is how a profile treats a call: as it is, by its arguments, or
// not at all.
type class string

const (
	classAllowed class = "allowed"
	classChecked class = "checked by its arguments"
	classRefused class = "refused"
)

// dockerClasses is how Docker's profile treats each call on arch
// ("amd64", "arm64") for a container without capabilities, as the
// agent is (a rule that needs a capability does not apply; a rule that
// applies unless the container has one does). The kernel is newer than
// every minKernel of the profile.
func dockerClasses(t *testing.T, arch string) map[string]class {
	b, err := os.ReadFile("testdata/docker-default.json")
	if err != nil {
		t.Fatal(err)
	}
	var p dockerProfile
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	out := map[string]class{}
	for _, s := range p.Syscalls {
		if len(s.Includes.Caps) > 0 || s.Action != "SCMP_ACT_ALLOW" {
			continue
		}
		if len(s.Includes.Arches) > 0 && !contains(s.Includes.Arches, arch) {
			continue
		}
		c := classAllowed
		if len(s.Args) > 0 {
			c = classChecked
		}
		for _, n := range s.Names {
			if out[n] != classAllowed {
				out[n] = c
			}
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// dockerDifferences are the calls our policy treats otherwise than
// Docker's profile, on purpose. A refusal with another errno is not a
// difference: Docker answers EPERM to every call it does not name, we
// ENOSYS (policy's comment says why).
var dockerDifferences = map[string]string{
	"adjtimex":      "refused: the host clock's discipline is no business of a box's (Docker allows reading it; setting it needs CAP_SYS_TIME)",
	"clock_adjtime": "refused: as adjtimex",
	"chmod":         "checked: no set-id bits from a box (mode without S_ISUID or S_ISGID)",
	"fchmod":        "checked: as chmod",
	"fchmodat":      "checked: as chmod",
	"fchmodat2":     "checked: as chmod",
	"socketpair":    "checked: the socket families of a box, as socket (Docker checks only socket)",
	"creat":         "checked: as chmod, for the mode a file is created with",
	"open":          "checked: as creat, when it creates (O_CREAT, O_TMPFILE)",
	"openat":        "checked: as open",
	"mknod":         "checked: as creat",
	"mknodat":       "checked: as creat",
	"openat2":       "absent (ENOSYS): its mode is in memory the filter cannot read, so it would plant set-id files past the open check; callers fall back to openat",
	"unshare":       "checked: allowed without namespace flags (CLONE_FILES, CLONE_FS), as clone; Docker refuses it without CAP_SYS_ADMIN",
}

// dockerChecksOtherwise are the calls both check by their arguments,
// with other checks; the calls both check alike are in dockerChecksAlike
// (TestProgram holds our checks).
var (
	dockerChecksOtherwise = map[string]string{
		"socket": "AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK only; Docker allows every family but AF_ALG and AF_VSOCK",
	}
	dockerChecksAlike = []string{"clone", "personality"}
)

func TestComparedWithDocker(t *testing.T) {
	ours := map[string]class{}
	for n, r := range policy(Options{}) {
		switch r.do {
		case allow:
			ours[n] = classAllowed
		case refuse, absent:
			ours[n] = classRefused
		default:
			ours[n] = classChecked
		}
	}
	for col, arch := range []string{"amd64", "arm64"} {
		docker := dockerClasses(t, arch)
		for _, c := range numbers {
			if c.nr[col] < 0 {
				continue
			}
			n := c.name
			d, o := docker[n], ours[n]
			if d == "" {
				d = classRefused
			}
			if o == "" {
				o = classRefused
			}
			why, listed := dockerDifferences[n]
			if d == classChecked && o == classChecked {
				if _, other := dockerChecksOtherwise[n]; !other && !contains(dockerChecksAlike, n) {
					t.Errorf("%s on %s: checked by both; say in dockerChecksOtherwise how, or put it in dockerChecksAlike", n, arch)
				}
			}
			switch {
			case d != o && !listed:
				t.Errorf("%s on %s: Docker %s, ours %s; make it Docker's, or say why in dockerDifferences", n, arch, d, o)
			case d == o && listed:
				t.Errorf("%s on %s: %s by both, but dockerDifferences says %q", n, arch, d, why)
			case d != o:
				t.Logf("%s on %s: Docker %s, ours %s (%s)", n, arch, d, o, why)
			}
		}
	}
}
