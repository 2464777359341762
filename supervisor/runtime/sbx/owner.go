package sbx

// Ownership without labels. A sandbox has a name and nothing else the
// supervisor could tag it with, so:
//
//   - the run-scoped name carries the instance and the launch id
//     (SandboxName, ParseSandboxName);
//   - the journaled nonce is written into the sandbox at create, as a
//     root-owned read-only file in a root-owned folder that the agent
//     (a non-root uid with no capabilities) cannot change (NonceWriteArgs);
//   - reconcile removes a sandbox only when the name, the journal entry
//     and the nonce read back from inside it all agree and the owner is
//     proven gone (Decide); anything else is reported, BLOCKED.

import (
	"fmt"
	"strconv"
	"strings"
)

// NamePrefix starts every sandbox name this runtime makes.
const NamePrefix = "dw-"

// MaxNameLen is the longest sandbox name: a DNS label, since the docs
// do not say and a sandbox name becomes a host name.
const MaxNameLen = 63

var (
	// '.' too (sbx names take it): doctor's and prove's instances are
	// INSTANCE.doctor and INSTANCE.prove.
	instanceRE = lazyRegexp(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
	// launchIDRE is the shape of a launch id (supervisor/internal/launchid): UTC time and 4 random bytes.
	launchIDRE = lazyRegexp(`^[0-9]{8}-[0-9]{6}-[0-9a-f]{8}$`)
	nonceRE    = lazyRegexp(`^[0-9a-f]{16,128}$`)
)

// launchIDLen is len("20060102-150405-0123abcd").
const launchIDLen = 24

// MaxInstanceLen is what the name leaves for the instance.
const MaxInstanceLen = MaxNameLen - len(NamePrefix) - 1 - launchIDLen

// SandboxName is the run-scoped name: dw-INSTANCE-LAUNCHID. The
// instance must be a lower-case DNS label fragment short enough for the
// whole name to stay one; a name is parsed from its end, so an instance
// may itself hold '-'.
func SandboxName(instance, launchID string) (string, error) {
	if len(instance) > MaxInstanceLen || !instanceRE().MatchString(instance) {
		return "", fmt.Errorf("--instance %q cannot name a sandbox: use lower-case letters, digits, '.' and '-' (at most %d, not starting or ending with either)", instance, MaxInstanceLen)
	}
	if !launchIDRE().MatchString(launchID) {
		return "", fmt.Errorf("launch id %q is not YYYYMMDD-HHMMSS-8 hex digits", launchID)
	}
	return NamePrefix + instance + "-" + launchID, nil
}

// ParseSandboxName reads SandboxName back; ok is false for any name this
// runtime did not make.
func ParseSandboxName(name string) (instance, launchID string, ok bool) {
	rest, found := strings.CutPrefix(name, NamePrefix)
	if !found || len(name) > MaxNameLen || len(rest) < launchIDLen+2 {
		return "", "", false
	}
	instance, launchID = rest[:len(rest)-launchIDLen-1], rest[len(rest)-launchIDLen:]
	if rest[len(rest)-launchIDLen-1] != '-' || !launchIDRE().MatchString(launchID) || !instanceRE().MatchString(instance) {
		return "", "", false
	}
	return instance, launchID, true
}

// NonceDir and NoncePath are where the nonce lives inside the sandbox:
// root-owned, mode 0755 and 0444, under /etc, which the agent cannot
// write.
const (
	NonceDir  = "/etc/deathwatch"
	NoncePath = NonceDir + "/nonce"
)

// nonceWriteScript runs as root in the sandbox (sbx exec -u root) with
// the nonce on stdin: it refuses to run as anyone else, replaces
// whatever the template held at NonceDir (a link included), and
// renames the file into place so that a reader never sees half of it.
// It reads one line, never waiting for the end of stdin: an exec whose
// stdin EOF does not reach the sandbox must not hang it.
const nonceWriteScript = `set -eu
[ "$(id -u)" = 0 ] || { echo "deathwatch: sbx exec -u root did not run as root" >&2; exit 3; }
umask 022
rm -rf ` + NonceDir + `
mkdir -m 0755 ` + NonceDir + `
chown 0:0 ` + NonceDir + `
IFS= read -r n || [ -n "$n" ]
printf '%s\n' "$n" > ` + NonceDir + `/.nonce.tmp
chown 0:0 ` + NonceDir + `/.nonce.tmp
chmod 0444 ` + NonceDir + `/.nonce.tmp
mv -f ` + NonceDir + `/.nonce.tmp ` + NoncePath + `
`

// NonceWriteArgs writes the nonce, which goes on the exec's stdin (not
// a secret, but an argv is the agent's to read in /proc).
func NonceWriteArgs(name string) []string {
	return []string{"exec", "-i", "-u", ExecUser, name, "/bin/sh", "-c", nonceWriteScript}
}

// NonceReadArgs prints the nonce.
func NonceReadArgs(name string) []string {
	return []string{"exec", "-u", ExecUser, name, "cat", NoncePath}
}

// countScript counts the processes whose environment holds $1
// (NAME=VALUE): prove-deathwatch watches the agent die from inside the
// VM. The value is an argument, never part of the script. Each environ
// is split at its NULs first (busybox grep stops at a NUL); a process
// that is gone by the time it is read does not count.
const countScript = `n=0; for f in /proc/[0-9]*/environ; do tr "\000" "\n" 2>/dev/null <"$f" | grep -q -x -F -e "$1" && n=$((n+1)); done; echo $n`

// CountArgs counts the processes in the sandbox whose environment holds env.
func CountArgs(name, env string) []string {
	return []string{"exec", "-u", ExecUser, name, "/bin/sh", "-c", countScript, "sh", env}
}

// ParseCount reads CountArgs' output.
func ParseCount(out string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("count processes: unexpected output %q", truncate(strings.TrimSpace(out), 80))
	}
	return n, nil
}

// ParseNonce reads NonceReadArgs' output.
func ParseNonce(out string) (string, error) {
	n := strings.TrimSpace(out)
	if !nonceRE().MatchString(n) {
		return "", fmt.Errorf("the sandbox's nonce file holds %q, not a nonce", truncate(n, 80))
	}
	return n, nil
}

// Claim is what reconcile knows about one listed sandbox.
type Claim struct {
	Name     string // as listed
	Instance string // the reconciling supervisor's instance

	// Journaled: there is an open journal entry of Instance for Name,
	// with LaunchID and Nonce.
	Journaled bool
	LaunchID  string
	Nonce     string

	NonceRead string // read back from inside the sandbox
	NonceErr  error  // reading it failed

	OwnerGone bool // the supervisor that made it is proven gone
}

// Verdict is what reconcile does with a sandbox.
type Verdict int

const (
	Ignore  Verdict = iota // not this instance's: not ours to touch or report
	Remove                 // ours, proven: sbx rm --force and its rules
	Blocked                // looks like ours but not proven: report, never remove
)

// Decide is reconcile's rule for a listed sandbox. It removes only what
// it proved it owns; a name of another instance, or one this runtime
// did not make, is ignored.
func Decide(c Claim) (Verdict, string) {
	inst, launchID, ok := ParseSandboxName(c.Name)
	switch {
	case !ok || inst != c.Instance:
		return Ignore, "not a sandbox of instance " + c.Instance
	case !c.Journaled:
		return Blocked, fmt.Sprintf("sandbox %s carries this instance's name but has no open journal entry", c.Name)
	case c.LaunchID != launchID:
		return Blocked, fmt.Sprintf("sandbox %s: the journal's launch id %s differs from the name's %s", c.Name, c.LaunchID, launchID)
	case c.NonceErr != nil:
		return Blocked, fmt.Sprintf("sandbox %s: read its nonce: %v", c.Name, c.NonceErr)
	case c.NonceRead != c.Nonce:
		return Blocked, fmt.Sprintf("sandbox %s: the nonce inside it does not match the journal", c.Name)
	case !c.OwnerGone:
		return Blocked, fmt.Sprintf("sandbox %s: its supervisor is not proven gone", c.Name)
	}
	return Remove, ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
