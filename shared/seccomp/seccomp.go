// Package seccomp builds the syscall filter every box's agent runs
// under: a classic BPF program for seccomp(SECCOMP_SET_MODE_FILTER),
// modelled on Docker's default profile for a process without
// capabilities. The supervisor compiles it and sends it in the launch
// spec; the watcher only installs it, so the PID-1 binary carries no
// filter compiler.
//
// One program serves both supported architectures (x86_64 and arm64):
// it branches on seccomp_data.arch, so it does not depend on the
// host that built it. Any other architecture, and the x32 ABI on
// x86_64, kills the process.
//
// The package is pure Go with no dependency (it builds for the
// supervisor on macOS and Windows too). Measured against the served
// alternatives, stripped static binaries of a program that only builds
// a filter: fmt alone 1,585,278 bytes; with this package 1,589,374
// (+4 KiB); with github.com/elastic/go-seccomp-bpf 1,749,118 (+160 KiB,
// it brings golang.org/x/net/bpf). github.com/moby/profiles/seccomp is
// Docker's profile as data for libseccomp, not a BPF compiler.
package seccomp

import (
	"encoding/binary"
	"errors"
	"strconv"
)

// Insn is one classic BPF instruction (struct sock_filter).
type Insn struct {
	Code   uint16
	Jt, Jf uint8
	K      uint32
}

// MaxInsns is the kernel's limit on one program (BPF_MAXINSNS).
const MaxInsns = 4096

// Classic BPF opcodes and seccomp values, from linux/filter.h,
// linux/bpf_common.h, linux/seccomp.h and linux/audit.h.
const (
	ldAbsW   = 0x20 // BPF_LD | BPF_W | BPF_ABS
	jeqK     = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	jgeK     = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	jsetK    = 0x45 // BPF_JMP | BPF_JSET | BPF_K
	retK     = 0x06 // BPF_RET | BPF_K
	RetKill  = 0x80000000
	RetErrno = 0x00050000
	RetAllow = 0x7fff0000

	ArchX86_64  = 0xc000003e
	ArchAArch64 = 0xc00000b7

	offNr   = 0  // seccomp_data.nr
	offArch = 4  // seccomp_data.arch
	offArg0 = 16 // seccomp_data.args[0], low word (both arches are little-endian)

	x32Bit       = 0x40000000 // __X32_SYSCALL_BIT
	cloneNewUser = 0x10000000 // CLONE_NEWUSER
	eperm        = 1
	enosys       = 38
)

// Options are what a spec may change in the filter.
type Options struct {
	// AllowUserns lets the agent make nested user namespaces, and with
	// them the calls that only work inside one: unshare and clone with
	// namespace flags, clone3, setns, and the mount family.
	AllowUserns bool
}

// action is what a rule does with a matching call.
type action int

const (
	deny            action = iota // EPERM
	noClone3                      // ENOSYS: libc falls back to clone, whose flags the filter can see
	noNewUser                     // EPERM when args[0] has CLONE_NEWUSER (clone, unshare)
	safePersonality               // EPERM unless args[0] is one of Docker's allowed personas
)

// rule is one syscall by its number on each architecture (-1: the
// architecture has no such call).
type rule struct {
	name         string
	amd64, arm64 int
	do           action
	userns       bool // lifted by AllowUserns
}

// rules is Docker's default profile seen from an agent without
// capabilities: the calls Docker leaves out or grants only with a
// capability the agent never has, plus io_uring (Docker 25+).
// ptrace, kcmp, process_vm_* and name_to_handle_at stay allowed, as in
// Docker on kernels 4.8 and later.
var rules = []rule{
	{"keyctl", 250, 219, deny, false},
	{"add_key", 248, 217, deny, false},
	{"request_key", 249, 218, deny, false},
	{"bpf", 321, 280, deny, false},
	{"perf_event_open", 298, 241, deny, false},
	{"userfaultfd", 323, 282, deny, false},
	{"kexec_load", 246, 104, deny, false},
	{"kexec_file_load", 320, 294, deny, false},
	{"init_module", 175, 105, deny, false},
	{"finit_module", 313, 273, deny, false},
	{"delete_module", 176, 106, deny, false},
	{"create_module", 174, -1, deny, false},
	{"get_kernel_syms", 177, -1, deny, false},
	{"query_module", 178, -1, deny, false},
	{"clock_settime", 227, 112, deny, false},
	{"clock_adjtime", 305, 266, deny, false},
	{"settimeofday", 164, 170, deny, false},
	{"adjtimex", 159, 171, deny, false},
	{"swapon", 167, 224, deny, false},
	{"swapoff", 168, 225, deny, false},
	{"reboot", 169, 142, deny, false},
	{"acct", 163, 89, deny, false},
	{"quotactl", 179, 60, deny, false},
	{"quotactl_fd", 443, 443, deny, false},
	{"lookup_dcookie", 212, 18, deny, false},
	{"io_uring_setup", 425, 425, deny, false},
	{"io_uring_enter", 426, 426, deny, false},
	{"io_uring_register", 427, 427, deny, false},
	{"open_by_handle_at", 304, 265, deny, false},
	{"iopl", 172, -1, deny, false},
	{"ioperm", 173, -1, deny, false},
	{"nfsservctl", 180, 42, deny, false},
	{"syslog", 103, 116, deny, false},
	{"uselib", 134, -1, deny, false},
	{"ustat", 136, -1, deny, false},
	{"sysfs", 139, -1, deny, false},
	{"_sysctl", 156, -1, deny, false},
	{"fanotify_init", 300, 262, deny, false},
	{"personality", 135, 92, safePersonality, false},
	// Namespaces and mounts.
	{"mount", 165, 40, deny, true},
	{"umount2", 166, 39, deny, true},
	{"pivot_root", 155, 41, deny, true},
	{"move_mount", 429, 429, deny, true},
	{"open_tree", 428, 428, deny, true},
	{"fsopen", 430, 430, deny, true},
	{"fsconfig", 431, 431, deny, true},
	{"fsmount", 432, 432, deny, true},
	{"fspick", 433, 433, deny, true},
	{"mount_setattr", 442, 442, deny, true},
	{"setns", 308, 268, deny, true},
	{"unshare", 272, 97, noNewUser, true},
	{"clone", 56, 220, noNewUser, true},
	{"clone3", 435, 435, noClone3, true},
}

// personas are the personality(2) arguments Docker allows: PER_LINUX,
// PER_LINUX32, UNAME26, PER_LINUX32|UNAME26 and the query 0xffffffff.
var personas = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// Program is the filter for o.
func Program(o Options) []Insn {
	p := []Insn{
		ld(offArch),
		jump(jeqK, ArchX86_64, 1, 0),
		jump(jumpAlways, 0, 0, 0), // patched: to arm64
	}
	// x86_64: x32 calls (the same numbers with bit 30 set) kill.
	p = append(p, ld(offNr), jump(jgeK, x32Bit, 0, 1), ret(RetKill))
	p = append(p, arch(o, func(r rule) int { return r.amd64 })...)
	arm := len(p)
	p[2].K = uint32(arm - 3)
	p = append(p, jump(jeqK, ArchAArch64, 1, 0), ret(RetKill), ld(offNr))
	return append(p, arch(o, func(r rule) int { return r.arm64 })...)
}

// jumpAlways is BPF_JMP | BPF_JA.
const jumpAlways = 0x05

// arch is the rules for one architecture, with the syscall number in
// A on entry. Every rule is self-contained: a call that does not match
// falls through with A intact; a match returns.
func arch(o Options, nr func(rule) int) []Insn {
	var p []Insn
	for _, r := range rules {
		n := nr(r)
		if n < 0 || (r.userns && o.AllowUserns) {
			continue
		}
		var body []Insn
		switch r.do {
		case deny:
			body = []Insn{ret(RetErrno | eperm)}
		case noClone3:
			body = []Insn{ret(RetErrno | enosys)}
		case noNewUser:
			body = []Insn{ld(offArg0), jump(jsetK, cloneNewUser, 0, 1), ret(RetErrno | eperm), ret(RetAllow)}
		case safePersonality:
			body = []Insn{ld(offArg0)}
			for i, v := range personas {
				body = append(body, jump(jeqK, v, uint8(len(personas)-i), 0))
			}
			body = append(body, ret(RetErrno|eperm), ret(RetAllow))
		}
		p = append(p, jump(jeqK, uint32(n), 0, uint8(len(body))))
		p = append(p, body...)
	}
	return append(p, ret(RetAllow))
}

func ld(off uint32) Insn                            { return Insn{Code: ldAbsW, K: off} }
func ret(k uint32) Insn                             { return Insn{Code: retK, K: k} }
func jump(code uint16, k uint32, jt, jf uint8) Insn { return Insn{Code: code, Jt: jt, Jf: jf, K: k} }

// Default is the encoded filter a spec carries for every box.
func Default(allowUserns bool) []byte {
	return Marshal(Program(Options{AllowUserns: allowUserns}))
}

// Marshal encodes a program for the spec: 8 bytes per instruction,
// little-endian code, jt, jf, k.
func Marshal(p []Insn) []byte {
	b := make([]byte, 0, 8*len(p))
	for _, in := range p {
		b = binary.LittleEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.LittleEndian.AppendUint32(b, in.K)
	}
	return b
}

// Unmarshal decodes what Marshal made. The kernel checks the program
// itself when it is installed.
func Unmarshal(b []byte) ([]Insn, error) {
	if err := Check(b); err != nil {
		return nil, err
	}
	p := make([]Insn, len(b)/8)
	for i := range p {
		c := b[8*i:]
		p[i] = Insn{Code: binary.LittleEndian.Uint16(c), Jt: c[2], Jf: c[3], K: binary.LittleEndian.Uint32(c[4:])}
	}
	return p, nil
}

// Check reports whether b can be an encoded program.
func Check(b []byte) error {
	switch n := len(b); {
	case n == 0:
		return errors.New("empty program")
	case n%8 != 0:
		return errors.New(strconv.Itoa(n) + " bytes are not whole instructions of 8 bytes")
	case n/8 > MaxInsns:
		return errors.New(strconv.Itoa(n/8) + " instructions exceed the kernel's limit of " + strconv.Itoa(MaxInsns))
	}
	return nil
}
