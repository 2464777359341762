package watcher

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"deathwatch/shared/landlock"
	"golang.org/x/sys/unix"
)

// agentScopes are what the agent's Landlock domain scopes: the agent
// can neither connect to an abstract unix socket nor signal a process
// made outside the domain — the watcher, a process an engine's exec put
// in the box, and with --network host the host's abstract sockets (X11,
// D-Bus, containerd). Its own processes it still reaches.
const agentScopes = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL

// writeAccess are the rights the agent's domain handles: every way of
// writing to the file system (landlock.WriteABI has them all). The
// agent keeps them only beneath its writable paths; reading and
// executing stay as the mounts and modes allow.
const writeAccess = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE |
	unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
	unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
	unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
	unix.LANDLOCK_ACCESS_FS_MAKE_SYM | unix.LANDLOCK_ACCESS_FS_REFER

// fileWriteAccess are the rights of writeAccess a rule on a file (not
// a folder) can grant.
const fileWriteAccess = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE

// landlockPlan is the agent's Landlock domain as plain data, worked out
// before the spawn: the scopes, the handled write rights and one rule
// per writable path, on a descriptor (O_PATH) opened by the watcher.
type landlockPlan struct {
	abi     int
	scoped  uint64
	handled uint64
	rules   []landlockRule
}

type landlockRule struct {
	fd     int
	access uint64
}

// refusedError is a box the watcher refuses to start (ExitRefused).
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// planLandlock works out the agent's domain on this kernel (see
// landlockLayers) and opens its writable paths. A nil plan is no
// domain.
//
// A writable path is opened as the box shows it before the agent runs:
// a link on the way is followed (the engine mounted where it leads, and
// a rule grants no more than the modes and mounts allow), a missing one
// is skipped (what the agent makes there, it makes in a folder whose
// own rule decides).
func planLandlock(writable []string, require bool) (*landlockPlan, string, error) {
	abi, err := landlock.ABI()
	writes, scopes, warn, err := landlockLayers(abi, err, len(writable) > 0, require)
	if err != nil || !writes && !scopes {
		return nil, warn, err
	}
	p := &landlockPlan{abi: abi}
	if scopes {
		p.scoped = agentScopes
	}
	if !writes {
		return p, warn, nil
	}
	p.handled = writeAccess
	for _, path := range writable {
		fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS})
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			p.close()
			return nil, "", errors.New("open the writable path " + path + " for the agent's write limits: " + os.NewSyscallError("openat2", err).Error())
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			p.close()
			return nil, "", errors.New("stat the writable path " + path + ": " + os.NewSyscallError("fstat", err).Error())
		}
		access := uint64(writeAccess)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access = fileWriteAccess
		}
		p.rules = append(p.rules, landlockRule{fd: fd, access: access})
	}
	return p, warn, nil
}

// landlockLayers decides which layers of the domain the agent gets on
// a kernel whose ABI probe answered abi, err: the scopes from
// landlock.ScopeABI, the write limits (when the box has any) from
// landlock.WriteABI. A kernel without a layer loses only that layer;
// warn says so when it is the write limits or when a seccomp profile
// around the box refuses Landlock (doctor, on the host, reports the
// rest). With require, a missing layer is a refusal instead. Pure:
// table-tested.
func landlockLayers(abi int, err error, limited, require bool) (writes, scopes bool, warn string, refusal error) {
	why := "this kernel's Landlock is ABI " + itoa(abi)
	profile := false // a seccomp profile around the box (the engine's) refuses the call
	if err != nil {
		abi, why = 0, "this kernel has no Landlock ("+err.Error()+")"
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP) {
			profile, why = true, "a seccomp profile around the box refuses Landlock ("+err.Error()+")"
		}
	}
	writes = limited && abi >= landlock.WriteABI
	scopes = abi >= landlock.ScopeABI
	var missing []string
	if limited && !writes {
		missing = append(missing, "write limits (ABI "+itoa(landlock.WriteABI)+", Linux 6.2)")
	}
	if !scopes {
		missing = append(missing, "scopes (ABI "+itoa(landlock.ScopeABI)+", Linux 6.12)")
	}
	if len(missing) > 0 && require {
		return false, false, "", &refusedError{"--require-landlock: " + why + ", without the agent's " + strings.Join(missing, " and ") + "; run the box on a kernel that has them (landlock in its lsm= list), or drop --require-landlock"}
	}
	switch {
	case profile:
		warn = "the agent runs without its Landlock layer: " + why + "; --require-landlock refuses such a box"
	case limited && !writes:
		warn = "the agent's writes are not limited to the box's writable paths: " + why + " (write limits need ABI " + itoa(landlock.WriteABI) + ", Linux 6.2); --require-landlock refuses such a box"
	}
	return writes, scopes, warn, nil
}

// close drops the plan's descriptors (close-on-exec: the agent never
// holds them).
func (p *landlockPlan) close() {
	if p == nil {
		return
	}
	for _, r := range p.rules {
		unix.Close(r.fd)
	}
	p.rules = nil
}

// restrictThread puts the calling thread in a new Landlock domain made
// of the plan; the agent forked from it inherits the domain, the
// watcher's other threads stay out. A kernel that has the ABI and
// refuses the domain is a failed setup. It must be called with the OS
// thread locked, after no_new_privs.
func restrictThread(p *landlockPlan) error {
	// Only the fields up to scoped: an older kernel refuses a longer
	// struct whose tail it does not know unless that tail is zero, and
	// this one has no use for the tail.
	attr := unix.LandlockRulesetAttr{Handled_access_fs: p.handled, Scoped: p.scoped}
	size := unsafe.Offsetof(attr.Scoped) + unsafe.Sizeof(attr.Scoped)
	fd, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return os.NewSyscallError("landlock_create_ruleset (ABI "+strconv.Itoa(p.abi)+")", e)
	}
	defer unix.Close(int(fd))
	for _, r := range p.rules {
		rule := unix.LandlockPathBeneathAttr{Allowed_access: r.access, Parent_fd: int32(r.fd)}
		if _, _, e := unix.RawSyscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); e != 0 {
			return os.NewSyscallError("landlock_add_rule", e)
		}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		return os.NewSyscallError("landlock_restrict_self", e)
	}
	return nil
}
